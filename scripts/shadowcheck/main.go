//go:build rewind_shadow && (amd64 || arm64)

// Command shadowcheck measures gostack's shadow-stack captures against a
// plain frame-pointer loop of its own, independently of gostack's own
// benchmark table: wall-clock time from testing.Benchmark, interleaved pairs
// (the order alternates), the median of the per-pair ratios. Build it with
// the goshadow overlay:
//
//	rewind goshadow overlay -o DIR
//	go run -overlay=DIR/overlay.json -tags rewind_shadow ./scripts/shadowcheck [-pairs N] [-benchtime D]
//
// With -clock thread it measures the benchmark thread's CPU time instead.
// Rows: ShadowCallers vs the loop (best case: the same capture repeated at
// one depth; worst case: a capture in every frame on the way down and on
// the way up), and ShadowStackID vs the loop plus a Go map look-up of the
// PCs (the execution tracer's stack ID: a walk, then a hash table).
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/rewindstack/rewind/gostack"
	"golang.org/x/sys/unix"
)

// threadClock selects the calling thread's CPU time instead of the wall
// clock (-clock thread): on a shared machine it leaves out the time other
// processes run instead of the benchmark.
var threadClock bool

func threadCPU() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return ts.Nano()
}

// callerFP returns its caller's frame pointer (fp_GOARCH.s).
func callerFP() unsafe.Pointer

// loop is the runtime's fpTracebackPCs: frame records, no checks.
//
//go:noinline
//go:nocheckptr
func loop(pcs []uintptr) int {
	fp := callerFP()
	i := 0
	for ; i < len(pcs) && fp != nil; i++ {
		pcs[i] = *(*uintptr)(unsafe.Add(fp, unsafe.Sizeof(uintptr(0))))
		fp = *(*unsafe.Pointer)(fp)
	}
	return i
}

// ids is the baseline's stack table: a Go map keyed by the PCs' bytes.
var ids = map[string]uint64{}

//go:noinline
func loopID(pcs []uintptr) uint64 {
	fp := callerFP()
	i := 0
	for ; i < len(pcs) && fp != nil; i++ {
		pcs[i] = *(*uintptr)(unsafe.Add(fp, unsafe.Sizeof(uintptr(0))))
		fp = *(*unsafe.Pointer)(fp)
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&pcs[0])), i*int(unsafe.Sizeof(uintptr(0))))
	if id, ok := ids[string(b)]; ok {
		return id
	}
	id := uint64(len(ids) + 1)
	ids[string(b)] = id
	return id
}

const (
	mLoop = iota
	mShadow
	mLoopID
	mID
)

var sink uint64

// best recurses to depth n and captures b.N times there. It restarts the
// thread-CPU clock at *start with the timer.
//
//go:noinline
func best(n, m int, pcs []uintptr, b *testing.B, start *int64) {
	if n > 1 {
		best(n-1, m, pcs, b, start)
		return
	}
	gostack.ShadowReset()
	b.ResetTimer()
	*start = threadCPU()
	var s uint64
	switch m {
	case mLoop:
		for range b.N {
			s += uint64(loop(pcs))
		}
	case mShadow:
		for range b.N {
			s += uint64(gostack.ShadowCallers(1, pcs))
		}
	case mLoopID:
		for range b.N {
			s += loopID(pcs)
		}
	case mID:
		for range b.N {
			s += gostack.ShadowStackID(1)
		}
	}
	sink += s
}

// worst captures, recurses to depth n, and captures again on the way back.
// The captures are called from worst itself, as in the source article (a
// helper that captured and returned would return through the trampoline
// after every capture: see gostack's adaptive policy).
//
//go:noinline
func worst(n, m int, pcs []uintptr) uint64 {
	var s uint64
	switch m {
	case mLoop:
		s = uint64(loop(pcs))
	case mShadow:
		s = uint64(gostack.ShadowCallers(1, pcs))
	case mLoopID:
		s = loopID(pcs)
	case mID:
		s = gostack.ShadowStackID(1)
	}
	if n > 1 {
		s += worst(n-1, m, pcs)
	}
	switch m {
	case mLoop:
		s += uint64(loop(pcs))
	case mShadow:
		s += uint64(gostack.ShadowCallers(1, pcs))
	case mLoopID:
		s += loopID(pcs)
	case mID:
		s += gostack.ShadowStackID(1)
	}
	return s
}

func run(c string, depth, m int) float64 {
	r := testing.Benchmark(func(b *testing.B) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		pcs := make([]uintptr, 1024)
		start := threadCPU()
		if c == "best" {
			best(depth, m, pcs, b, &start)
		} else {
			gostack.ShadowReset()
			b.ResetTimer()
			start = threadCPU()
			for range b.N {
				sink += worst(depth, m, pcs)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(threadCPU()-start)/float64(b.N), "cpu-ns/op")
	})
	if v, ok := r.Extra["cpu-ns/op"]; ok && threadClock {
		return v
	}
	return float64(r.T.Nanoseconds()) / float64(r.N)
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func main() {
	testing.Init()
	pairs := flag.Int("pairs", 7, "interleaved pairs per cell")
	bt := flag.String("benchtime", "50ms", "time per measurement")
	depthList := flag.String("depths", "1,2,4,8,16,32,64,128,256", "comma-separated depths")
	clock := flag.String("clock", "wall", "wall, or thread: the benchmark thread's CPU time")
	flag.Parse()
	threadClock = *clock == "thread"
	if err := flag.Set("test.benchtime", *bt); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var depths []int
	for _, f := range strings.Split(*depthList, ",") {
		var d int
		if _, err := fmt.Sscan(f, &d); err != nil || d < 1 {
			fmt.Fprintf(os.Stderr, "shadowcheck: bad depth %q\n", f)
			os.Exit(2)
		}
		depths = append(depths, d)
	}
	fmt.Printf("%s ns/op, median of %d interleaved pairs; x = median of baseline time / method time\n", map[bool]string{false: "wall-clock", true: "thread-CPU"}[threadClock], *pairs)
	fmt.Printf("%-6s %6s %9s %9s %7s %9s %9s %7s\n", "case", "depth", "loop", "Shadow", "x", "loop+map", "ID", "x")
	for _, c := range []string{"best", "worst"} {
		for _, d := range depths {
			var cols []string
			for _, pair := range [][2]int{{mLoop, mShadow}, {mLoopID, mID}} {
				var a, b, rs []float64
				for i := range *pairs {
					var x, y float64
					if i%2 == 0 {
						x = run(c, d, pair[0])
						y = run(c, d, pair[1])
					} else {
						y = run(c, d, pair[1])
						x = run(c, d, pair[0])
					}
					a, b, rs = append(a, x), append(b, y), append(rs, x/y)
				}
				cols = append(cols, fmt.Sprintf("%9.1f %9.1f %6.2fx", median(a), median(b), median(rs)))
			}
			fmt.Printf("%-6s %6d %s %s\n", c, d, cols[0], cols[1])
		}
	}
}
