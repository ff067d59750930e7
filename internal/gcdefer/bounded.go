package gcdefer

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
)

// ReportHeapLimit is the memory Go may take during a report before the
// collector runs (see LessGC): below the 200 MB of anonymous memory a
// report may take whatever the file's size, with room for what the
// runtime does not count.
const ReportHeapLimit = 160 << 20

// lateGCPercent is the GOGC a report collects at once what is live
// passes three quarters of ReportHeapLimit (see LessGC).
const lateGCPercent = 20

// LessGC tunes the garbage collector for a report (rewind report): nearly
// everything it allocates (samples, stacks, locations) lives to the end, so collections
// find little garbage, and they were a fifth of rewind report's time.
// Nothing is collected until the memory Go takes reaches
// ReportHeapLimit; then the collector runs to stay under it, whatever
// the file's size. Before, the limit was 512 MiB plus 4 times the file's
// size: a 318 MB system-wide recording (14,658 distinct stacks, 40,641
// locations) took 415 MB of anonymous memory, most of it garbage (walk
// memos of exited threads, the section data symbol tables were decoded
// from, copies of growing maps). A profile whose distinct stacks take
// more than the limit has the collector run often, at most half the
// CPU (the runtime's limiter), and goes past it. A GOGC or GOMEMLIMIT
// the user set is kept. The returned function restores the default
// collector (for what the process does after the report, the tests).
func LessGC() (restore func()) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	// (Not the settings Until restores at the first collection, which
	// would lift the limit.)
	gc, limit := Cancel()
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(ReportHeapLimit)
	var mu sync.Mutex
	done := false
	AfterEach(func() bool {
		mu.Lock()
		defer mu.Unlock()
		if done {
			return false
		}
		// (Stopping the world, but only after the few collections
		// the limit starts.)
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if ms.HeapAlloc > ReportHeapLimit/4*3 {
			// What is live after a collection nearly fills the
			// limit: the collector would run again and again (a 2 GB
			// system-wide recording's report took 69 s, most of its
			// output phase collecting). The limit is lifted, and the
			// heap collected each time it grew by a fifth: with the
			// default (100), a report of 150 MB of distinct stacks
			// and symbols (a 2 GB system-wide recording beside a
			// build, 209,126 distinct stacks) peaked at 275 MB of
			// anonymous memory.
			debug.SetGCPercent(lateGCPercent)
			debug.SetMemoryLimit(math.MaxInt64)
			done = true
			return false
		}
		return true
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		done = true
		debug.SetGCPercent(gc)
		debug.SetMemoryLimit(limit)
	}
}

// AfterEach calls check after each garbage collection, from the runtime's
// cleanup goroutine, as long as check returns true.
func AfterEach(check func() bool) {
	// A sentinel unreachable at once: the next collection runs its
	// cleanup, which arms the next one. (Larger than 16 bytes: the tiny
	// allocator's blocks may outlive any one object.)
	runtime.AddCleanup(new([64]byte), func(int) {
		if check() {
			AfterEach(check)
		}
	}, 0)
}
