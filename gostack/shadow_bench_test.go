//go:build rewind_shadow

package gostack

import (
	"flag"
	"fmt"
	"hash/maphash"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
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
	modePlain = iota
	modeFP
	modeShadow
	modeEager
	modeCallers
	modePlain2  // plainFP2, the second copy of the plain loop
	modePlainID // plainID: the plain loop, then the stack's PCs looked up in a hash table
	modeID      // ShadowStackID
	numModes
)

var modeNames = []string{"Plain", "FP", "Shadow", "Eager", "Callers", "Plain2", "PlainID", "ID"}

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
	start := threadCPU()
	s := 0
	switch mode {
	case modePlain:
		for range b.N {
			s += plainFP(pcs)
		}
	case modePlain2:
		for range b.N {
			s += plainFP2(pcs)
		}
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
	case modePlainID:
		for range b.N {
			s += int(plainID(pcs))
		}
	case modeID:
		for range b.N {
			s += int(ShadowStackID(1))
		}
	}
	b.StopTimer()
	reportCPU(b, start)
	sink += s
}

// plainFP is the baseline of the source article: the Go runtime's
// fpTracebackPCs, a loop over frame records with no checks at all.
//
//go:noinline
//go:nocheckptr
func plainFP(pcs []uintptr) int {
	fp := getfp()
	i := 0
	for ; i < len(pcs) && fp != nil; i++ {
		pcs[i] = *(*uintptr)(unsafe.Add(fp, unsafe.Sizeof(uintptr(0))))
		fp = *(*unsafe.Pointer)(fp)
	}
	return i
}

// plainFP2 is plainFP again. Whether the plain loop is fast depends on where
// the linker puts it: the same code runs up to 1.3x slower when its loop
// crosses a 64-byte line (seen on AMD Zen 4 at depths 1-8), and functions are
// aligned to 32 bytes, so an edit anywhere in the package can move it. The
// two copies are adjacent and each is more than 128 bytes long and less
// than 160, so they start 32 bytes apart modulo 64 and one of them has the
// good placement; the table takes the faster of the two in each round.
//
//go:noinline
//go:nocheckptr
func plainFP2(pcs []uintptr) int {
	fp := getfp()
	i := 0
	for ; i < len(pcs) && fp != nil; i++ {
		pcs[i] = *(*uintptr)(unsafe.Add(fp, unsafe.Sizeof(uintptr(0))))
		fp = *(*unsafe.Pointer)(fp)
	}
	return i
}

// plainID is the baseline of ShadowStackID: what the runtime's execution
// tracer does for a stack ID (traceStack, then its stack table's put): the
// plain frame-record loop, then the PCs hashed with the runtime's memhash
// (hash/maphash) and looked up in a hash table that compares them.
//
//go:noinline
//go:nocheckptr
func plainID(pcs []uintptr) uint64 {
	fp := getfp()
	i := 0
	for ; i < len(pcs) && fp != nil; i++ {
		pcs[i] = *(*uintptr)(unsafe.Add(fp, unsafe.Sizeof(uintptr(0))))
		fp = *(*unsafe.Pointer)(fp)
	}
	return plainIDs.lookup(pcs[:i])
}

// pcTable is plainID's table: open addressing, linear probing, each entry
// a hash, an ID and a copy of the PCs.
type pcTable struct {
	seed  maphash.Seed
	slots []pcEntry
	n     int
}

type pcEntry struct {
	hash uint64
	id   uint64
	pcs  []uintptr
}

var plainIDs = &pcTable{seed: maphash.MakeSeed(), slots: make([]pcEntry, 1024)}

func (t *pcTable) lookup(pcs []uintptr) uint64 {
	h := maphash.Bytes(t.seed, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(pcs))), len(pcs)*int(unsafe.Sizeof(uintptr(0)))))
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		e := &t.slots[i]
		if e.pcs == nil {
			return t.add(h, pcs)
		}
		if e.hash == h && slices.Equal(e.pcs, pcs) {
			return e.id
		}
	}
}

//go:noinline
func (t *pcTable) add(h uint64, pcs []uintptr) uint64 {
	if (t.n+1)*4 > len(t.slots)*3 {
		old := t.slots
		t.slots = make([]pcEntry, 2*len(old))
		t.n = 0
		for _, e := range old {
			if e.pcs != nil {
				t.put(e)
			}
		}
	}
	e := pcEntry{hash: h, id: uint64(t.n + 1), pcs: slices.Clone(pcs)}
	t.put(e)
	return e.id
}

func (t *pcTable) put(e pcEntry) {
	mask := uint64(len(t.slots) - 1)
	i := e.hash & mask
	for t.slots[i].pcs != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = e
	t.n++
}

// threadCPU reads the CPU time of the calling thread: unlike the wall
// clock, it does not count the time other processes of the shared machine
// run instead of the benchmark. The benchmarks lock their goroutine to its
// thread.
func threadCPU() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return ts.Nano()
}

func reportCPU(b *testing.B, start int64) {
	if end := threadCPU(); start != 0 && end > start {
		b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
	}
}

//go:noinline
func worstCase(n, mode int, pcs []uintptr) int {
	s := 0
	switch mode {
	case modePlain:
		s += plainFP(pcs)
	case modePlain2:
		s += plainFP2(pcs)
	case modeFP:
		s += CallersFP(1, pcs)
	case modeShadow:
		s += ShadowCallers(1, pcs)
	case modeEager:
		s += ShadowCallersEager(1, pcs)
	case modeCallers:
		s += runtime.Callers(1, pcs)
	case modePlainID:
		s += int(plainID(pcs))
	case modeID:
		s += int(ShadowStackID(1))
	}
	if n > 1 {
		s += worstCase(n-1, mode, pcs)
	}
	switch mode {
	case modePlain:
		s += plainFP(pcs)
	case modePlain2:
		s += plainFP2(pcs)
	case modeFP:
		s += CallersFP(1, pcs)
	case modeShadow:
		s += ShadowCallers(1, pcs)
	case modeEager:
		s += ShadowCallersEager(1, pcs)
	case modeCallers:
		s += runtime.Callers(1, pcs)
	case modePlainID:
		s += int(plainID(pcs))
	case modeID:
		s += int(ShadowStackID(1))
	}
	return s
}

func benchWorst(b *testing.B, depth, mode int) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pcs := make([]uintptr, 1024)
	ShadowReset()
	s := 0
	b.ResetTimer()
	start := threadCPU()
	for range b.N {
		s += worstCase(depth, mode, pcs)
	}
	b.StopTimer()
	reportCPU(b, start)
	sink += s
}

func benchBest(b *testing.B, depth, mode int) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
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

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

var (
	shadowTable  = flag.Bool("shadowtable", false, "run the shadow-stack benchmarks and print their ratio tables")
	shadowRounds = flag.Int("shadowrounds", 5, "with -shadowtable: rounds per cell; the table shows medians")
	shadowCases  = flag.String("shadowcases", "best,worst", "with -shadowtable: which tables")
	shadowDepths = flag.String("shadowdepths", "", "with -shadowtable: comma-separated depths (default: all of benchDepths)")
	shadowModes  = flag.String("shadowmodes", "", "with -shadowtable: comma-separated methods besides Plain, which always runs (default: all)")
	shadowID     = flag.Bool("shadowid", false, "with -shadowtable: stack IDs instead: ShadowStackID vs the plain loop plus a hash-table look-up (plainID)")
)

// TestShadowBenchTable prints the best- and worst-case tables side by side:
//
//	go test -overlay=DIR/overlay.json -tags rewind_shadow ./gostack \
//		-run ShadowBenchTable -v -shadowtable -test.benchtime=200ms
//
// Every cell is measured -shadowrounds times, interleaved with the others;
// the methods of a cell run back to back and each round gives a ratio, of
// which the table shows the median (the machine is shared). Ratios are
// the plain loop's time (Plain: the runtime's fpTracebackPCs, the source
// article's baseline) divided by the method's: above 1 is faster than the
// plain loop.
func TestShadowBenchTable(t *testing.T) {
	if !*shadowTable {
		t.Skip("pass -shadowtable to run the benchmarks")
	}
	cases := []struct {
		name string
		run  func(*testing.B, int, int)
	}{{"best", benchBest}, {"worst", benchWorst}}
	cases = slices.DeleteFunc(cases, func(c struct {
		name string
		run  func(*testing.B, int, int)
	}) bool {
		return !slices.Contains(strings.Split(*shadowCases, ","), c.name)
	})
	depths := benchDepths
	if *shadowDepths != "" {
		depths = nil
		for _, f := range strings.Split(*shadowDepths, ",") {
			var d int
			if _, err := fmt.Sscan(f, &d); err != nil || d < 1 {
				t.Fatalf("-shadowdepths: bad depth %q", f)
			}
			depths = append(depths, d)
		}
	}
	modes := []int{modePlain, modePlain2}
	for mode, name := range modeNames[1:modePlain2] {
		if *shadowModes == "" || slices.Contains(strings.Split(*shadowModes, ","), name) {
			modes = append(modes, mode+1)
		}
	}
	if *shadowID {
		modes = []int{modePlainID, modeID}
	}
	// ns[case][depth][mode][round]
	ns := make([][][numModes][]float64, len(cases))
	for i := range ns {
		ns[i] = make([][numModes][]float64, len(depths))
	}
	for round := range *shadowRounds {
		for ci, c := range cases {
			for di, depth := range depths {
				// The methods of one cell run back to back, so a change
				// of load on the shared machine hits them alike; every
				// other round in the reverse order, so neither side
				// always runs first.
				order := slices.Clone(modes)
				if round%2 == 1 {
					slices.Reverse(order)
				}
				for _, mode := range order {
					r := testing.Benchmark(func(b *testing.B) { c.run(b, depth, mode) })
					v, ok := r.Extra["cpu-ns/op"]
					if !ok {
						v = float64(r.T.Nanoseconds()) / float64(r.N)
					}
					ns[ci][di][mode] = append(ns[ci][di][mode], v)
				}
			}
		}
	}
	align := func(f func([]uintptr) int) uintptr {
		return runtime.FuncForPC(reflect.ValueOf(f).Pointer()).Entry() % 64
	}
	if *shadowID {
		printIDTable(t, cases, depths, ns)
		return
	}
	for ci, c := range cases {
		var out strings.Builder
		fmt.Fprintf(&out, "\n%s case: median thread-CPU ns/op of %d rounds; Plain = the faster of two copies of the loop (at %d and %d mod 64 bytes) in each round; ratio = median over rounds of Plain time / method time\n",
			c.name, *shadowRounds, align(plainFP), align(plainFP2))
		fmt.Fprintf(&out, "%6s %9s %9s %9s %9s %10s %8s %8s %8s %8s\n", "depth", "Plain", "FP", "Shadow", "Eager", "Callers", "FP", "Shadow", "Eager", "Callers")
		for di, depth := range depths {
			v := ns[ci][di]
			for r := range v[modePlain] {
				v[modePlain][r] = min(v[modePlain][r], v[modePlain2][r])
			}
			var med [numModes]float64
			var ratio [numModes]float64
			for _, mode := range modes {
				med[mode] = median(v[mode])
				rs := make([]float64, len(v[mode]))
				for r := range rs {
					rs[r] = v[0][r] / v[mode][r]
				}
				ratio[mode] = median(rs)
			}
			fmt.Fprintf(&out, "%6d %9.1f %9.1f %9.1f %9.1f %10.1f %7.2fx %7.2fx %7.2fx %7.2fx\n", depth, med[0], med[1], med[2], med[3], med[4],
				ratio[1], ratio[2], ratio[3], ratio[4])
		}
		t.Log(out.String())
	}
}

// printIDTable prints TestShadowBenchTable's results with -shadowid.
func printIDTable(t *testing.T, cases []struct {
	name string
	run  func(*testing.B, int, int)
}, depths []int, ns [][][numModes][]float64) {
	for ci, c := range cases {
		var out strings.Builder
		fmt.Fprintf(&out, "\n%s case, stack IDs: median thread-CPU ns/op of %d rounds; PlainID = plain loop + hash-table look-up of the PCs; ratio = median over rounds of PlainID time / ID time\n", c.name, *shadowRounds)
		fmt.Fprintf(&out, "%6s %9s %9s %8s\n", "depth", "PlainID", "ID", "ID")
		for di, depth := range depths {
			v := ns[ci][di]
			rs := make([]float64, len(v[modeID]))
			for r := range rs {
				rs[r] = v[modePlainID][r] / v[modeID][r]
			}
			fmt.Fprintf(&out, "%6d %9.1f %9.1f %7.2fx\n", depth, median(v[modePlainID]), median(v[modeID]), median(rs))
		}
		t.Log(out.String())
	}
}
