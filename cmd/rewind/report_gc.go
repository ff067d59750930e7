package main

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
)

// lessGC tunes the garbage collector for a report: nearly everything it
// allocates (samples, stacks, locations) lives to the end, so collections
// find little garbage, and they were a fifth of rewind report's time. Until
// the heap reaches 512 MiB plus 4 times the file's size (more than the
// samples of any recording take) nothing is collected; the returned
// function, called once the file is read, restores the default collector
// when the heap has already grown past half that. A GOGC or GOMEMLIMIT the
// user set is kept.
func lessGC(path string) (restore func()) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	var size int64
	if st, err := os.Stat(path); err == nil {
		size = st.Size()
	}
	limit := 512<<20 + 4*min(size, 1<<40)
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(limit)
	return func() {
		// runtime.ReadMemStats rather than runtime/metrics, whose
		// package initializer (0.19 ms) every rewind command would run.
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if ms.HeapAlloc > uint64(limit/2) {
			debug.SetGCPercent(100)
			debug.SetMemoryLimit(math.MaxInt64)
		}
	}
}
