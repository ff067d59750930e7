// Package gcdefer tunes the garbage collector of rewind's commands: it
// postpones the first cycle in short-lived commands (Until), and holds a
// report, which keeps nearly all it allocates, under a heap limit with
// few collections (LessGC).
//
// A warm `rewind dump` allocates a few megabytes and exits within
// milliseconds; with Go's defaults (the first cycle at a 4 MB heap) it
// spends a collection, and the write barriers and assists around it,
// on memory the exit frees anyway. Until turns collection off below a
// heap limit and restores the defaults when the first cycle runs, so a
// command that does grow (a dump of 100,000 goroutines, a large report)
// is collected as usual from then on.
package gcdefer

import (
	"os"
	"runtime"
	"runtime/debug"
	"sync"
)

// pending is the restore Until's first collection will make, until it
// makes it or Cancel takes it.
var pending struct {
	sync.Mutex
	set     bool
	percent int
	limit   int64
}

// Until lets the heap grow to limit bytes before the first collection;
// from that collection on, the garbage collector runs with the settings it
// had before. It does nothing when the user set GOGC or GOMEMLIMIT.
func Until(limit int64) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	percent := debug.SetGCPercent(-1)
	memLimit := debug.SetMemoryLimit(limit)
	pending.Lock()
	pending.set, pending.percent, pending.limit = true, percent, memLimit
	pending.Unlock()
	// The sentinel is unreachable at once, so the first cycle (the one
	// the limit starts) finds it and runs the cleanup. It is larger than
	// 16 bytes so that the tiny allocator, whose blocks may outlive any
	// one object, does not hold it.
	sentinel := new([64]byte)
	runtime.AddCleanup(sentinel, func(int) {
		pending.Lock()
		defer pending.Unlock()
		if pending.set {
			pending.set = false
			debug.SetGCPercent(pending.percent)
			debug.SetMemoryLimit(pending.limit)
		}
	}, 0)
}

// Cancel keeps the first collection from restoring the settings Until
// changed, for a command that sets its own (rewind report's memory
// limit), and returns those settings: what the collector ran with before
// Until, or the current settings when Until changed none or they were
// restored already.
func Cancel() (percent int, limit int64) {
	pending.Lock()
	defer pending.Unlock()
	if pending.set {
		pending.set = false
		return pending.percent, pending.limit
	}
	percent = debug.SetGCPercent(-1)
	debug.SetGCPercent(percent)
	return percent, debug.SetMemoryLimit(-1)
}
