//go:build rewind_shadow

package gostack

import (
	"flag"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// The source article's benchmarks, with the overlay:
//
//	best case:  recurse to depth N, then capture b.N times;
//	worst case: at each level capture, recurse one level, capture again on
//	            the way back (one op = the whole descent and return).
//
// Methods: CallersFP (plain frame-pointer walk), ShadowCallers (adaptive),
// ShadowCallersEager (the article's policy: always cache, patch the
// capturing function's return slot) and runtime.Callers (reference). Each
// capture is called directly from the recursive function, as in the article.

const (
	modeFP = iota
	modeShadow
	modeEager
	modeCallers
)

var modeNames = []string{"FP", "Shadow", "Eager", "Callers"}

var benchDepths = []int{1, 2, 4, 8, 16, 32, 64, 128, 256}

var sink int

//go:noinline
func bestCase(n, mode int, pcs []uintptr, b *testing.B) {
	if n > 1 {
		bestCase(n-1, mode, pcs, b)
		return
	}
	ShadowReset()
	b.ResetTimer()
	s := 0
	switch mode {
	case modeFP:
		for range b.N {
			s += CallersFP(1, pcs)
		}
	case modeShadow:
		for range b.N {
			s += ShadowCallers(1, pcs)
		}
	case modeEager:
		for range b.N {
			s += ShadowCallersEager(1, pcs)
		}
	case modeCallers:
		for range b.N {
			s += runtime.Callers(1, pcs)
		}
	}
	b.StopTimer()
	sink += s
}

//go:noinline
func worstCase(n, mode int, pcs []uintptr) int {
	s := 0
	switch mode {
	case modeFP:
		s += CallersFP(1, pcs)
	case modeShadow:
		s += ShadowCallers(1, pcs)
	case modeEager:
		s += ShadowCallersEager(1, pcs)
	case modeCallers:
		s += runtime.Callers(1, pcs)
	}
	if n > 1 {
		s += worstCase(n-1, mode, pcs)
	}
	switch mode {
	case modeFP:
		s += CallersFP(1, pcs)
	case modeShadow:
		s += ShadowCallers(1, pcs)
	case modeEager:
		s += ShadowCallersEager(1, pcs)
	case modeCallers:
		s += runtime.Callers(1, pcs)
	}
	return s
}

func benchWorst(b *testing.B, depth, mode int) {
	pcs := make([]uintptr, 1024)
	ShadowReset()
	s := 0
	b.ResetTimer()
	for range b.N {
		s += worstCase(depth, mode, pcs)
	}
	b.StopTimer()
	sink += s
}

func benchBest(b *testing.B, depth, mode int) {
	pcs := make([]uintptr, 1024)
	bestCase(depth, mode, pcs, b)
}

func BenchmarkShadow(b *testing.B) {
	for _, c := range []struct {
		name string
		run  func(*testing.B, int, int)
	}{{"best", benchBest}, {"worst", benchWorst}} {
		for _, depth := range benchDepths {
			for mode, name := range modeNames {
				b.Run(fmt.Sprintf("%s/depth=%d/%s", c.name, depth, name), func(b *testing.B) {
					c.run(b, depth, mode)
				})
			}
		}
	}
}

var shadowTable = flag.Bool("shadowtable", false, "run the shadow-stack benchmarks and print their ratio tables")

// TestShadowBenchTable prints the best- and worst-case tables side by side
// (go test -run ShadowBenchTable -shadowtable -v). Ratios are CallersFP's
// time divided by the method's: above 1 is faster than the plain walk.
func TestShadowBenchTable(t *testing.T) {
	if !*shadowTable {
		t.Skip("pass -shadowtable to run the benchmarks")
	}
	for _, c := range []struct {
		name string
		run  func(*testing.B, int, int)
	}{{"best", benchBest}, {"worst", benchWorst}} {
		var out strings.Builder
		fmt.Fprintf(&out, "\n%s case, ns/op, ratio = FP time / method time\n", c.name)
		fmt.Fprintf(&out, "%6s %10s %10s %10s %10s %8s %8s %8s\n", "depth", "FP", "Shadow", "Eager", "Callers", "Shadow", "Eager", "Callers")
		for _, depth := range benchDepths {
			var ns [4]float64
			for mode := range modeNames {
				r := testing.Benchmark(func(b *testing.B) { c.run(b, depth, mode) })
				ns[mode] = float64(r.T.Nanoseconds()) / float64(r.N)
			}
			fmt.Fprintf(&out, "%6d %10.1f %10.1f %10.1f %10.1f %7.2fx %7.2fx %7.2fx\n", depth, ns[0], ns[1], ns[2], ns[3],
				ns[0]/ns[1], ns[0]/ns[2], ns[0]/ns[3])
		}
		t.Log(out.String())
	}
}
