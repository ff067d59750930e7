package main

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/rewindstack/rewind/perfdata"
)

// lessGC tunes the garbage collector for a report: nearly everything it
// allocates (samples, stacks, locations) lives to the end, so collections
// find little garbage, and they were a fifth of rewind report's time. Until
// the heap reaches 512 MiB plus 4 times the file's size (more than the
// samples of any recording take) nothing is collected; the returned
// function, called once the file is read, restores the default collector,
// in the background, when the heap (as far as anonBytes tells) has
// already grown past half that. A GOGC or GOMEMLIMIT the user set is
// kept, and so is the default for a file whose records may be compressed,
// whose size does not tell what they take: its samples are unwound while
// it is read, and the garbage their copies leave is collected.
func lessGC(path string) (restore func()) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" || perfdata.MayBeCompressed(path) {
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
		// Off the report's path: the check reads a /proc file (0.15 ms).
		go func() {
			if anonBytes() > limit/2 {
				debug.SetGCPercent(100)
				debug.SetMemoryLimit(math.MaxInt64)
			}
		}()
	}
}

// anonBytes is how much anonymous memory the process has resident, which
// bounds the heap from above: /proc/self/statm's resident pages less its
// file-backed ones (the perf.data mapping). runtime.ReadMemStats stops
// the world, which waits for every goroutine to reach a safe point, one
// in a page fault included: it took 0.4 to 2 ms after the records were
// read, while the file was still being mapped in (runtime/metrics does
// not stop it, but its package initializer took 0.19 ms in every rewind
// command).
func anonBytes() int64 {
	if b, err := os.ReadFile("/proc/self/statm"); err == nil {
		// size resident shared text lib data dt, in pages
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			resident, err1 := strconv.ParseInt(f[1], 10, 64)
			shared, err2 := strconv.ParseInt(f[2], 10, 64)
			if err1 == nil && err2 == nil && resident >= shared {
				return (resident - shared) * int64(os.Getpagesize())
			}
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
