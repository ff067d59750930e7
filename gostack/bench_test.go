package gostack

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// benchStackDepth is the depth of the stack the benchmarks capture from;
// each capture stops at the size of its buffer, so "depth=N" measures the
// capture of the innermost N logical frames (inlined frames count).
const benchStackDepth = 300

//go:noinline
func benchRecurse(depth int, leaf func()) {
	if depth <= 1 {
		leaf()
		return
	}
	benchRecurse(depth-1, leaf)
}

// benchRecurseInlined has one inlined frame in every physical frame, so
// every other logical frame comes from the inline tree.
//
//go:noinline
func benchRecurseInlined(depth int, leaf func()) {
	if depth <= 1 {
		leaf()
		return
	}
	benchInlinedStep(depth, leaf)
}

func benchInlinedStep(depth int, leaf func()) { benchRecurseInlined(depth-1, leaf) }

type benchVariant struct {
	name string
	fn   func(pcs, scratch []uintptr) int
}

var benchVariants = []benchVariant{
	{"runtime", func(pcs, _ []uintptr) int { return runtime.Callers(1, pcs) }},
	{"fast", func(pcs, _ []uintptr) int { return Callers(1, pcs) }},
	{"fp", func(pcs, _ []uintptr) int { return CallersFP(1, pcs) }},
	{"fp+expand", func(pcs, scratch []uintptr) int {
		// What a caller that stores physical stacks pays to expand
		// one later.
		n := CallersFP(1, scratch)
		return Expand(pcs, scratch[:n], 0)
	}},
}

// BenchmarkCallers compares runtime.Callers, Callers (same result),
// CallersFP (physical frames only) and CallersFP followed by Expand, at
// depths 1 to 256, on a stack of plain calls and on one where every other
// frame is inlined. Run with
//
//	go test ./gostack -run '^$' -bench . -count 5
func BenchmarkCallers(b *testing.B) {
	shapes := []struct {
		name    string
		recurse func(int, func())
	}{
		{"plain", benchRecurse},
		{"inlined", benchRecurseInlined},
	}
	for _, shape := range shapes {
		for d := 1; d <= 256; d *= 2 {
			for _, v := range benchVariants {
				b.Run(fmt.Sprintf("%s/depth=%d/%s", shape.name, d, v.name), func(b *testing.B) {
					pcs := make([]uintptr, d)
					scratch := make([]uintptr, d)
					done := make(chan int, 1)
					go func() {
						shape.recurse(benchStackDepth, func() {
							// Warm: fill the cache and the
							// pclntab caches first.
							n := v.fn(pcs, scratch)
							b.ResetTimer()
							for i := 0; i < b.N; i++ {
								n = v.fn(pcs, scratch)
							}
							b.StopTimer()
							done <- n
						})
					}()
					if n := <-done; n != d {
						b.Fatalf("captured %d frames, want %d", n, d)
					}
				})
			}
		}
	}
}

// BenchmarkRatio measures the same four variants as BenchmarkCallers, but
// interleaved: blocks of 64 captures of each variant in turn, timed
// separately, so that a load change on a shared machine hits all of them
// alike. It reports each variant's ns per capture and runtime.Callers'
// time divided by each variant's ("x-fast" for Callers, "x-fp" for
// CallersFP, "x-fp+expand"). ns/op is the time of one capture of each of
// the four.
//
//	go test ./gostack -run '^$' -bench Ratio -count 5
func BenchmarkRatio(b *testing.B) {
	shapes := []struct {
		name    string
		recurse func(int, func())
	}{
		{"plain", benchRecurse},
		{"inlined", benchRecurseInlined},
	}
	for _, shape := range shapes {
		for d := 1; d <= 256; d *= 2 {
			b.Run(fmt.Sprintf("%s/depth=%d", shape.name, d), func(b *testing.B) {
				pcs := make([]uintptr, d)
				scratch := make([]uintptr, d)
				var total [4]time.Duration
				done := make(chan error, 1)
				go func() {
					shape.recurse(benchStackDepth, func() {
						for _, v := range benchVariants {
							if n := v.fn(pcs, scratch); n != d {
								done <- fmt.Errorf("%s captured %d frames, want %d", v.name, n, d)
								return
							}
						}
						const block = 64
						b.ResetTimer()
						for i := 0; i < b.N; i += block {
							m := min(block, b.N-i)
							for k, v := range benchVariants {
								start := time.Now()
								for j := 0; j < m; j++ {
									v.fn(pcs, scratch)
								}
								total[k] += time.Since(start)
							}
						}
						b.StopTimer()
						done <- nil
					})
				}()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				per := func(k int) float64 { return float64(total[k].Nanoseconds()) / float64(b.N) }
				for k, v := range benchVariants {
					b.ReportMetric(per(k), v.name+"-ns")
					if k > 0 {
						b.ReportMetric(per(0)/per(k), "x-"+v.name)
					}
				}
			})
		}
	}
}
