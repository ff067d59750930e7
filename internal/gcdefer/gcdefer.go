// Package gcdefer postpones the garbage collector's first cycle in
// short-lived commands.
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
)

// Until lets the heap grow to limit bytes before the first collection;
// from that collection on, the garbage collector runs with the settings it
// had before. It does nothing when the user set GOGC or GOMEMLIMIT.
func Until(limit int64) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	percent := debug.SetGCPercent(-1)
	memLimit := debug.SetMemoryLimit(limit)
	// The sentinel is unreachable at once, so the first cycle (the one
	// the limit starts) finds it and runs the cleanup. It is larger than
	// 16 bytes so that the tiny allocator, whose blocks may outlive any
	// one object, does not hold it.
	sentinel := new([64]byte)
	runtime.AddCleanup(sentinel, func(int) {
		debug.SetGCPercent(percent)
		debug.SetMemoryLimit(memLimit)
	}, 0)
}
