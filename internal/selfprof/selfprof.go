// Package selfprof profiles rewind's own run, for tuning rewind itself:
// built with -tags rewindprof, the command runs under Run, which writes
// a pprof CPU profile to $REWIND_CPUPROFILE, a heap profile of every
// allocation to $REWIND_MEMPROFILE, and the heap at its peak to
// $REWIND_PEAKHEAPPROFILE. Only that build imports it: linking
// runtime/pprof into every rewind made each start slower (rewind
// --version took 11.4 ms with it and 10.8 ms without: medians of 60
// interleaved pairs, on a VM where first touches of memory are costly).
package selfprof

import (
	"os"
	"runtime"
	"runtime/pprof"

	"github.com/rewindstack/rewind/internal/gcdefer"
	"github.com/rewindstack/rewind/internal/outfile"
)

// Run runs the command run, profiled as the environment asks, and
// returns its exit status.
func Run(run func() int) int {
	if path := os.Getenv("REWIND_CPUPROFILE"); path != "" {
		if f, err := outfile.Create(path, 0o666); err == nil {
			defer f.Abort()
			if pprof.StartCPUProfile(f) == nil {
				defer func() {
					pprof.StopCPUProfile()
					f.Commit()
				}()
			}
		}
	}
	if path := os.Getenv("REWIND_MEMPROFILE"); path != "" {
		// Every allocation of the run (alloc_space): during a report
		// the heap is mostly not collected, so this is close to the
		// anonymous memory the run took.
		defer func() {
			runtime.GC() // (inuse_space: what is live at the end)
			if f, err := outfile.Create(path, 0o666); err == nil {
				defer f.Abort()
				if pprof.Lookup("allocs").WriteTo(f, 0) == nil {
					f.Commit()
				}
			}
		}()
	}
	if path := os.Getenv("REWIND_PEAKHEAPPROFILE"); path != "" {
		peakHeapProfile(path)
	}
	return run()
}

// peakHeapProfile writes, after each garbage collection that found more
// live memory than any before, the heap profile (inuse_space: what was
// live at that collection) to path, for finding what a report's peak
// memory is made of.
func peakHeapProfile(path string) {
	var peak uint64
	gcdefer.AfterEach(func() bool {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if ms.HeapAlloc > peak {
			peak = ms.HeapAlloc
			if f, err := outfile.Create(path, 0o666); err == nil {
				defer f.Abort()
				if pprof.Lookup("heap").WriteTo(f, 0) == nil {
					f.Commit()
				}
			}
		}
		return true
	})
}
