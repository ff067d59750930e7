//go:build rewind_shadow

package gostack

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/google/pprof/profile"
)

// These tests run only with the overlay of package goshadow (goshadow's own
// tests start them). Every capture of ShadowCallers is compared with
// CallersFP (the plain frame-pointer walk, which reads the return slots as
// they are, so one slot may hold the trampoline) and, expanded, with
// runtime.Callers (the runtime's table-driven unwinder). At random moments
// the shadow stack is dropped, its patched slot restored, and CallersFP is
// compared exactly.

var trampolinePC = func() uintptr {
	// Capture with the eager policy from a frame deep enough, then read
	// the patched slot with the plain walk.
	var pc uintptr
	done := make(chan bool)
	go func() {
		defer close(done)
		var a, b [64]uintptr
		nest(3, func() {
			ShadowCallersEager(1, a[:])
			n := CallersFP(1, b[:])
			for _, p := range b[:n] {
				if f := runtime.FuncForPC(p); f != nil && f.Name() == "runtime.shadowTrampoline" {
					pc = p
				}
			}
		})
		ShadowReset()
	}()
	<-done
	return pc
}()

//go:noinline
func nest(n int, f func()) {
	if n == 0 {
		f()
		return
	}
	nest(n-1, f)
}

func TestShadowTrampolineFound(t *testing.T) {
	if trampolinePC == 0 {
		t.Fatal("an eager capture did not leave runtime.shadowTrampoline in a return slot")
	}
}

// isTrampoline reports whether a function name is one of the trampoline's two
// parts (an unwinder that steps through it correctly never shows them).
func isTrampoline(name string) bool {
	return name == "runtime.shadowTrampoline" || name == "runtime.shadowTrampolinePop"
}

// capturer is one way of capturing the stack with CallersFP's contract.
type capturer func(skip int, pcs []uintptr) int

var logical = func(skip int, pcs []uintptr) int { return runtime.Callers(skip+1, pcs) }

// resetFP drops the shadow stack (restoring the patched slot) and walks the
// untouched frame-pointer chain.
var resetFP = func(skip int, pcs []uintptr) int {
	ShadowReset()
	return CallersFP(skip+1, pcs)
}

// checker compares the captures at one point of a goroutine.
type checker struct {
	t       testing.TB
	rng     *rand.Rand
	fps     [4][]uintptr
	exp     [2][]uintptr
	checks  int
	resets  int
	plainOK int
	id      uint64 // the last ShadowStackID
	ids     int    // checks by ID
}

// seenIDs maps every stack ID the tests saw to its stack, and back, across
// goroutines.
var seenIDs struct {
	sync.Mutex
	stack map[uint64]string
	id    map[string]uint64
}

// checkID checks that c.id names the stack sh (StackPCs gave it; when short
// sh is truncated and the whole stack is read again) and no other.
func (c *checker) checkID(sh []uintptr, short bool) {
	c.ids++
	if c.id == 0 {
		c.fail("ShadowStackID returned 0 for %s", frames(sh))
	}
	if short {
		all := make([]uintptr, len(c.fps[0]))
		sh = all[:StackPCs(c.id, all)]
	}
	key := string(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(sh))), len(sh)*int(unsafe.Sizeof(uintptr(0)))))
	seenIDs.Lock()
	defer seenIDs.Unlock()
	if seenIDs.stack == nil {
		seenIDs.stack, seenIDs.id = map[uint64]string{}, map[string]uint64{}
	}
	if old, ok := seenIDs.stack[c.id]; ok && old != key {
		c.fail("ShadowStackID %d named another stack before; now %s", c.id, frames(sh))
	}
	if old, ok := seenIDs.id[key]; ok && old != c.id {
		c.fail("stack %s had ID %d, now %d", frames(sh), old, c.id)
	}
	seenIDs.stack[c.id], seenIDs.id[key] = key, c.id
}

func newChecker(t testing.TB, seed int64) *checker {
	c := &checker{t: t, rng: rand.New(rand.NewSource(seed))}
	for i := range c.fps {
		c.fps[i] = make([]uintptr, 4096)
	}
	for i := range c.exp {
		c.exp[i] = make([]uintptr, 8192)
	}
	return c
}

// captureAt calls f from one call site, so entry 0 (skip 1) is the same
// return address whichever f it is.
//
//go:noinline
func captureAt(f capturer, pcs []uintptr) int { return f(1, pcs) }

// captureIDAt is captureAt for ShadowStackID(1).
//
//go:noinline
func captureIDAt(c *checker, pcs []uintptr) int {
	c.id = ShadowStackID(1)
	return StackPCs(c.id, pcs)
}

func (c *checker) fail(format string, args ...any) {
	c.t.Helper()
	c.t.Errorf(format, args...)
	panic(errStop)
}

var errStop = errors.New("stop: a check failed")

// shared is contended by the stress test's machines, so that block and mutex
// profile events are recorded with patched frames on the stack.
var (
	shared      sync.Mutex
	contention  bool
	blockedChan = make(chan int)
)

// check captures with every method and compares.
func (c *checker) check() {
	c.checks++
	if contention && c.rng.Intn(8) == 0 {
		shared.Lock()
		runtime.Gosched()
		shared.Unlock()
		select {
		case blockedChan <- 1:
		case <-blockedChan:
		case <-time.After(time.Microsecond):
		}
	}
	methods := [4]capturer{ShadowCallersEager, CallersFP, logical, resetFP}
	byID := false
	switch c.rng.Intn(3) {
	case 0:
		methods[0] = ShadowCallers
	case 1:
		// The stack's ID, turned back into PCs.
		methods[0] = func(skip int, pcs []uintptr) int {
			c.id = ShadowStackID(skip + 1)
			return StackPCs(c.id, pcs)
		}
		byID = true
	}
	last := 3
	if c.rng.Intn(8) == 0 {
		// Sometimes drop the cache and compare with an untouched chain.
		last = 4
		c.resets++
	}
	// Sometimes a buffer shorter than the stack: the captures truncate.
	size := len(c.fps[0])
	short := c.rng.Intn(6) == 0
	if short {
		size = 1 + c.rng.Intn(12)
	}
	var n [4]int
	for i, f := range methods[:last] {
		n[i] = captureAt(f, c.fps[i][:size])
	}
	sh, fp := c.fps[0][:n[0]], c.fps[1][:n[1]]
	if len(sh) != len(fp) {
		c.fail("ShadowCallers gave %d frames, CallersFP %d\nshadow: %s\nfp:     %s", len(sh), len(fp), frames(sh), frames(fp))
	}
	patched := 0
	for i := range sh {
		if sh[i] == trampolinePC {
			c.fail("ShadowCallers returned the trampoline at %d: %s", i, frames(sh))
		}
		if fp[i] == trampolinePC {
			patched++
			continue
		}
		if sh[i] != fp[i] {
			c.fail("entry %d: ShadowCallers %s, CallersFP %s\nshadow: %s\nfp:     %s", i, frames(sh[i:i+1]), frames(fp[i:i+1]), frames(sh), frames(fp))
		}
	}
	if patched > 1 {
		c.fail("%d return slots hold the trampoline: %s", patched, frames(fp))
	}
	// The runtime's unwinder, and the shadow result expanded (a truncated
	// physical stack does not expand to a truncated logical one).
	want := c.fps[2][:n[2]]
	if short {
		want = nil
	}
	got := c.exp[0][:Expand(c.exp[0], sh, 0)]
	if !short && !slices.Equal(got, want) {
		c.fail("Expand(ShadowCallers) differs from runtime.Callers\ngot:  %s\nwant: %s", frames(got), frames(want))
	}
	if byID {
		c.checkID(sh, short)
		if !short {
			// ShadowStackID(1) too, which has paths of its own: from
			// another function, so entries 0 and 1 differ.
			got := c.exp[0][:captureIDAt(c, c.exp[0])]
			if len(got) != len(sh) || !slices.Equal(got[2:], sh[2:]) || !strings.HasSuffix(runtime.FuncForPC(got[0]-1).Name(), "captureIDAt") {
				c.fail("ShadowStackID(1) from captureIDAt differs from the capture above it\ngot:  %s\nwant: %s", frames(got), frames(sh))
			}
			c.checkID(got, false)
		}
	}
	if last == 4 {
		if fp := c.fps[3][:n[3]]; !slices.Equal(sh, fp) {
			c.fail("after ShadowReset, CallersFP differs from the shadow capture\nshadow: %s\nfp:     %s", frames(sh), frames(fp))
		}
		c.plainOK++
	}
}

func frames(pcs []uintptr) string {
	var b strings.Builder
	total := len(pcs)
	if total > 40 {
		pcs = pcs[:40]
	}
	for i, pc := range pcs {
		if i > 0 {
			b.WriteString(" ")
		}
		if f := runtime.FuncForPC(pc - 1); f != nil {
			name := f.Name()
			if j := strings.LastIndexByte(name, '.'); j >= 0 {
				name = name[j+1:]
			}
			fmt.Fprintf(&b, "%s+%#x", name, pc-f.Entry())
		} else {
			fmt.Fprintf(&b, "%#x", pc)
		}
	}
	if total > len(pcs) {
		fmt.Fprintf(&b, " ... (%d frames)", total)
	}
	return b.String()
}

// machine runs a random sequence of calls, returns, captures, panics and
// recovers on one goroutine.
type machine struct {
	*checker
	steps    int
	maxDepth int
	hits     int
}

type unwindTo struct{ depth int }

// Several functions with different frame sizes and call sites.

//go:noinline
func (m *machine) a(depth int) int {
	m.run(depth + 1)
	return depth
}

//go:noinline
func (m *machine) b(depth int) (int, float64) {
	var pad [16]uintptr
	pad[depth%16] = uintptr(depth)
	m.run(depth + 1)
	return int(pad[depth%16]), float64(depth) / 2
}

//go:noinline
func (m *machine) c(depth int) string {
	var pad [300]byte
	pad[depth%300] = byte(depth)
	m.run(depth + 1)
	return string(pad[depth%300 : depth%300+1])
}

// recoverer recovers an unwindTo aimed at its depth or above it, after
// checking the stack from inside the deferred call while panicking.
//
//go:noinline
func (m *machine) recoverer(depth int) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if r == errStop {
			panic(r)
		}
		u, ok := r.(unwindTo)
		if !ok {
			panic(r)
		}
		m.check()
		if u.depth < depth {
			panic(u)
		}
	}()
	m.run(depth + 1)
}

// run is one frame of the machine: it loops over random actions until one
// returns or the steps run out.
//
//go:noinline
func (m *machine) run(depth int) {
	for m.steps > 0 {
		m.steps--
		r := m.rng.Intn(100)
		switch {
		case r < 36 && depth < m.maxDepth:
			switch r % 3 {
			case 0:
				if got := m.a(depth); got != depth {
					m.fail("a returned %d, want %d", got, depth)
				}
			case 1:
				got, f := m.b(depth)
				if got != depth || f != float64(depth)/2 {
					m.fail("b returned %d, %v, want %d, %v", got, f, depth, float64(depth)/2)
				}
			case 2:
				if got := m.c(depth); got != string([]byte{byte(depth)}) {
					m.fail("c returned %q at depth %d", got, depth)
				}
			}
		case r < 42 && depth < m.maxDepth:
			m.recoverer(depth)
		case r < 62:
			return
		case r < 97:
			m.check()
		default:
			if depth > 0 {
				panic(unwindTo{m.rng.Intn(depth)})
			}
		}
	}
}

func (m *machine) start() (err error) {
	defer func() {
		if r := recover(); r != nil {
			if r == errStop {
				err = errStop
				return
			}
			if _, ok := r.(unwindTo); ok {
				return
			}
			panic(r)
		}
	}()
	m.recoverer(0)
	return nil
}

func runMachine(t testing.TB, seed int64, steps, maxDepth int) *machine {
	m := &machine{checker: newChecker(t, seed), maxDepth: maxDepth}
	for m.steps = steps; m.steps > 0; {
		if m.start() != nil {
			break
		}
	}
	_, m.hits = ShadowStats()
	return m
}

func TestShadowRandomSequences(t *testing.T) {
	seeds, steps := 40, 20000
	if testing.Short() {
		seeds, steps = 12, 3000
	}
	for seed := int64(1); seed <= int64(seeds); seed++ {
		maxDepth := []int{4, 16, 64, 300}[seed%4]
		done := make(chan *machine)
		go func() { // a fresh goroutine: a fresh shadow stack
			done <- runMachine(t, seed, steps, maxDepth)
		}()
		m := <-done
		if t.Failed() {
			t.Fatalf("seed %d failed", seed)
		}
		if m.checks == 0 || m.plainOK == 0 || m.ids == 0 {
			t.Fatalf("seed %d: %d checks, %d exact comparisons, %d by ID: the machine did nothing", seed, m.checks, m.plainOK, m.ids)
		}
		if seed%4 != 0 && m.hits == 0 {
			t.Errorf("seed %d (depth %d): no frame returned through the trampoline in %d checks", seed, maxDepth, m.checks)
		}
	}
}

// results returns many values through every result register.
//
//go:noinline
func results(depth int, pcs []uintptr, eager bool) (a, b, c, d, e, f, g, h, i int, x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14 float64) {
	if depth > 0 {
		return results(depth-1, pcs, eager)
	}
	if eager {
		ShadowCallersEager(1, pcs)
	}
	return 1, 2, 3, 4, 5, 6, 7, 8, 9, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5, 10.5, 11.5, 12.5, 13.5, 14.5, math.Pi
}

func TestShadowResultRegisters(t *testing.T) {
	var pcs [512]uintptr
	for _, depth := range []int{1, 2, 5, 40} {
		_, h0 := ShadowStats()
		a, b, c, d, e, f, g, h, i, x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14 := results(depth, pcs[:], true)
		_, h1 := ShadowStats()
		ints := []int{a, b, c, d, e, f, g, h, i}
		floats := []float64{x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14}
		for k, v := range ints {
			if v != k+1 {
				t.Errorf("depth %d: integer result %d = %d, want %d", depth, k, v, k+1)
			}
		}
		for k, v := range floats[:14] {
			if v != float64(k)+1.5 {
				t.Errorf("depth %d: float result %d = %v, want %v", depth, k, v, float64(k)+1.5)
			}
		}
		if x14 != math.Pi {
			t.Errorf("depth %d: float result 14 = %v", depth, x14)
		}
		if h1-h0 < depth {
			t.Errorf("depth %d: %d trampoline hits, want at least %d: the results did not go through it", depth, h1-h0, depth)
		}
	}
	ShadowReset()
}

// deep recurses n frames with a big frame, captures, and checks on the way.
//
//go:noinline
func deep(n int, c *checker, grow bool) int {
	var pad [64]byte
	pad[n%64] = 1
	if n == 0 {
		c.check()
		return 0
	}
	r := deep(n-1, c, grow)
	if grow && n%1000 == 0 {
		c.check()
	}
	return r + int(pad[n%64])
}

func TestShadowDeepRecursion(t *testing.T) {
	done := make(chan int)
	c := newChecker(t, 7)
	c.fps = [4][]uintptr{make([]uintptr, 120000), make([]uintptr, 120000), make([]uintptr, 120000), make([]uintptr, 120000)}
	c.exp = [2][]uintptr{make([]uintptr, 240000), nil}
	go func() {
		defer func() { recover(); close(done) }()
		// The captures move the stack: deep() grows it from 8 KiB.
		deep(100000, c, true)
		cached, _ := ShadowStats()
		if cached > 1<<16+8 {
			t.Errorf("%d frames cached after returning, want at most %d", cached, 1<<16)
		}
	}()
	<-done
}

// stackGrowth: capture, then grow the stack a lot (copystack moves the
// patched slot), then return through the trampoline and capture again.
func TestShadowCopyStack(t *testing.T) {
	done := make(chan bool)
	go func() {
		defer close(done)
		c := newChecker(t, 9)
		var pcs [64]uintptr
		nest(10, func() {
			ShadowCallersEager(1, pcs[:])
			deep(20000, c, false) // grows, and shrinks later at GC
			runtime.GC()
			c.check()
		})
		c.check()
	}()
	<-done
}

func TestShadowGoexit(t *testing.T) {
	for _, eager := range []bool{false, true} {
		done := make(chan [2]int)
		go func() {
			var pcs [128]uintptr
			defer func() {
				c, h := ShadowStats()
				done <- [2]int{c, h}
			}()
			nest(40, func() {
				if eager {
					ShadowCallersEager(1, pcs[:])
				} else {
					for range 3 {
						ShadowCallers(1, pcs[:])
					}
				}
				runtime.Goexit()
			})
		}()
		r := <-done
		if r[0] == 0 {
			t.Errorf("eager=%v: nothing cached before Goexit", eager)
		}
	}
	// Goroutines that captured and returned normally, then fresh ones,
	// which reuse the exited goroutines' g structures: their shadow stack
	// must start empty (it is freed with the goroutine).
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var pcs [128]uintptr
			nest(30, func() { ShadowCallersEager(1, pcs[:]) })
			if c, _ := ShadowStats(); c == 0 {
				t.Error("nothing cached after an eager capture")
			}
		}()
	}
	wg.Wait()
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c, h := ShadowStats(); c != 0 || h != 0 {
				t.Errorf("a new goroutine starts with %d cached frames and %d hits", c, h)
			}
		}()
	}
	wg.Wait()
}

// TestShadowRuntimeStack checks runtime.Stack and the frames of
// runtime.Callers while a slot is patched.
func TestShadowRuntimeStack(t *testing.T) {
	var pcs [128]uintptr
	var buf [1 << 16]byte
	var n int
	nest(8, func() {
		ShadowCallersEager(1, pcs[:])
		nest(3, func() {
			n = runtime.Stack(buf[:], false)
		})
	})
	s := string(buf[:n])
	if strings.Contains(s, "runtime.shadowTrampoline(") || strings.Contains(s, "runtime.shadowTrampolinePop(") || strings.Count(s, "gostack.nest(") != 13 {
		t.Errorf("runtime.Stack while patched:\n%s", s)
	}
	ShadowReset()
}

// TestShadowStress runs many goroutines of random machines with GC, CPU
// profiling, block profiling and the execution tracer on.
func TestShadowStress(t *testing.T) {
	goroutines, steps, duration := 32, 4000, 10*time.Second
	if testing.Short() {
		goroutines, steps, duration = 16, 1500, 2*time.Second
	}
	var prof, tr bytes.Buffer
	if err := pprof.StartCPUProfile(&prof); err != nil {
		t.Fatal(err)
	}
	if err := trace.Start(&tr); err != nil {
		t.Fatal(err)
	}
	runtime.SetBlockProfileRate(1)
	runtime.SetMutexProfileFraction(1)
	contention = true
	defer func() { contention = false }()
	old := runtime.MemProfileRate
	runtime.MemProfileRate = 512
	defer func() {
		runtime.SetBlockProfileRate(0)
		runtime.SetMutexProfileFraction(0)
		runtime.MemProfileRate = old
	}()

	stop := make(chan bool)
	go func() { // GC pressure, which also shrinks stacks
		for {
			select {
			case <-stop:
				return
			default:
				runtime.GC()
			}
		}
	}()
	var mu sync.Mutex
	var wg sync.WaitGroup
	deadline := time.Now().Add(duration)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := int64(0); time.Now().Before(deadline) && !t.Failed(); round++ {
				m := runMachine(t, int64(1000+g)+round*int64(goroutines), steps, []int{8, 32, 100, 400}[g%4])
				mu.Lock() // contention for the block and mutex profiles
				if m.checks == 0 {
					t.Errorf("goroutine %d did no checks", g)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(stop)
	trace.Stop()
	pprof.StopCPUProfile()
	if tr.Len() == 0 {
		t.Error("empty execution trace")
	}

	p, err := profile.Parse(&prof)
	if err != nil {
		t.Fatal(err)
	}
	machineSamples, broken := 0, 0
	for _, s := range p.Sample {
		var names []string
		for _, loc := range s.Location {
			for _, l := range loc.Line {
				names = append(names, l.Function.Name)
			}
		}
		joined := strings.Join(names, " ")
		if slices.ContainsFunc(names, isTrampoline) {
			t.Errorf("CPU profile sample through the trampoline: %s", joined)
		}
		if strings.Contains(joined, "gostack.(*machine).run") {
			machineSamples++
			// runtime/pprof drops runtime.goexit: a complete stack ends
			// in the goroutine's function. The CPU profiler keeps 64
			// physical frames, so only shorter samples are judged.
			last := names[len(names)-1]
			if len(s.Location) < 50 && last != "runtime.goexit" && !strings.Contains(last, "TestShadowStress.func") {
				t.Errorf("CPU profile sample does not reach the goroutine's function: %s", joined)
				if broken++; broken > 3 {
					t.FailNow()
				}
			}
		}
	}
	t.Logf("%d CPU samples, %d in the machines", len(p.Sample), machineSamples)
	for _, name := range []string{"block", "mutex", "heap"} {
		var b bytes.Buffer
		if err := pprof.Lookup(name).WriteTo(&b, 0); err != nil {
			t.Fatal(err)
		}
		bp, err := profile.Parse(&b)
		if err != nil {
			t.Fatal(name, err)
		}
		for _, s := range bp.Sample {
			for _, loc := range s.Location {
				for _, l := range loc.Line {
					if isTrampoline(l.Function.Name) {
						t.Errorf("%s profile holds the trampoline", name)
					}
				}
			}
		}
	}
}

// TestShadowTortureHook checks the overlay's torture hooks: with
// REWIND_SHADOW_TORTURE=1 runtime.Callers patches its caller's return slot,
// so returns go through the trampoline; without it, nothing happens.
func TestShadowTortureHook(t *testing.T) {
	on := os.Getenv("REWIND_SHADOW_TORTURE") == "1"
	done := make(chan int)
	go func() {
		_, h0 := ShadowStats()
		nest(5, func() {
			var pcs [8]uintptr
			runtime.Callers(0, pcs[:])
		})
		_, h1 := ShadowStats()
		done <- h1 - h0
	}()
	hits := <-done
	if on && hits < 6 || !on && hits != 0 {
		t.Errorf("REWIND_SHADOW_TORTURE=%v: %d returns through the trampoline after runtime.Callers", on, hits)
	}
}

// TestShadowFatalTraceback crashes a child process (started through
// $REWIND_SHADOW_EXEC when that is set, as goshadow's arm64 run does) with an unrecovered panic
// while a return slot holds the trampoline: the runtime's fatal traceback
// must print every frame (GOTRACEBACK=system shows the runtime's too).
func TestShadowFatalTraceback(t *testing.T) {
	if os.Getenv("REWIND_SHADOW_CRASH") == "1" {
		var pcs [64]uintptr
		nest(6, func() {
			ShadowCallersEager(1, pcs[:])
			nest(3, func() { panic("shadow boom") })
		})
		return
	}
	args := []string{os.Args[0], "-test.run=^TestShadowFatalTraceback$"}
	if wrap := os.Getenv("REWIND_SHADOW_EXEC"); wrap != "" {
		// Under emulation (qemu-user without binfmt_misc) the child
		// binary must be started through the emulator too.
		args = append([]string{wrap}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "REWIND_SHADOW_CRASH=1", "GOTRACEBACK=system")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the child did not crash:\n%s", out)
	}
	s := string(out)
	if !strings.Contains(s, "panic: shadow boom") || strings.Count(s, "gostack.nest(") != 11 ||
		!strings.Contains(s, "TestShadowFatalTraceback") || !strings.Contains(s, "runtime.goexit") ||
		strings.Contains(s, "unknown pc") || strings.Contains(s, "runtime.shadowTrampoline") {
		t.Errorf("fatal traceback with a patched frame:\n%s", s)
	}
}

// spin loops without calls: only asynchronous preemption (a signal) can
// stop it.
//
//go:noinline
func spin(n int) int {
	x := 0
	for i := 0; i < n; i++ {
		x += i * i
	}
	return x
}

//go:noinline
func spinDeep(depth, n int, pcs []uintptr, more func() bool) (bad int) {
	if depth > 0 {
		return spinDeep(depth-1, n, pcs, more)
	}
	ShadowCallersEager(1, pcs)
	want := spin(n)
	for more() {
		if spin(n) != want {
			bad++
		}
	}
	return bad
}

// TestShadowAsyncPreempt spins in goroutines whose stacks hold a patched
// return slot while the GC stops them (asynchronous preemption: the loop in
// spin makes no calls) and scans their stacks through the trampoline.
func TestShadowAsyncPreempt(t *testing.T) {
	stop := make(chan bool)
	var gcs atomic.Int32
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				runtime.GC()
				gcs.Add(1)
			}
		}
	}()
	// Spin until the GC has run a few times during the spins.
	rounds, chunk, spinners := int32(4), 20_000_000, 4
	if testing.Short() {
		rounds, chunk, spinners = 2, 5_000_000, 2
	}
	target := gcs.Load() + rounds
	more := func() bool { return gcs.Load() < target }
	var wg sync.WaitGroup
	for range spinners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var pcs [256]uintptr
			if bad := spinDeep(60, chunk, pcs[:], more); bad != 0 {
				t.Errorf("%d spins computed a wrong sum", bad)
			}
			if _, hits := ShadowStats(); hits < 60 {
				t.Errorf("%d returns through the trampoline, want at least 60", hits)
			}
		}()
	}
	wg.Wait()
	close(stop)
	t.Logf("%d GCs", gcs.Load())
}

// TestShadowSkipZero: with skip 0 entry 0 is a PC inside the capture
// function itself (gostack's, which on amd64 is assembly that hands this
// case to Go), then the return addresses from the caller up, as CallersFP
// gives them.
func TestShadowSkipZero(t *testing.T) {
	for _, c := range []struct {
		name string
		f    capturer
	}{
		{"github.com/rewindstack/rewind/gostack.ShadowCallers", ShadowCallers},
		{"github.com/rewindstack/rewind/gostack.ShadowCallersEager", ShadowCallersEager},
	} {
		for range 3 { // nothing cached, then cached (skip 0 patches our return slot)
			var a, b [128]uintptr
			n := c.f(0, a[:])
			m := CallersFP(1, b[:])
			if n < 3 || m < 2 || n != m+1 {
				t.Fatalf("%s(0): %d frames, CallersFP(1): %d", c.name, n, m)
			}
			for i, pc := range b[:m] {
				if pc == trampolinePC {
					b[i] = a[i+1] // the slot the capture patched
				}
			}
			if f := runtime.FuncForPC(a[0] - 1); f == nil || f.Name() != c.name {
				t.Errorf("%s(0): entry 0 %#x is not inside it: %s", c.name, a[0], frames(a[:1]))
			}
			self := runtime.FuncForPC(b[0] - 1)
			if f := runtime.FuncForPC(a[1] - 1); f == nil || self == nil || f.Entry() != self.Entry() {
				t.Errorf("%s(0): entry 1 is %s, want the caller %s", c.name, frames(a[1:2]), frames(b[:1]))
			}
			if !slices.Equal(a[2:n], b[1:m]) {
				t.Errorf("%s(0) above the caller:\n%s\nCallersFP:\n%s", c.name, frames(a[2:n]), frames(b[1:m]))
			}
		}
		ShadowReset()
	}
}

// TestShadowCopyAlignment: the steady state copies the cache into pcs with
// wide stores, whole cache lines and masked partial ones, so the copy is
// checked at every alignment of pcs and several cache lengths.
func TestShadowCopyAlignment(t *testing.T) {
	done := make(chan string)
	go func() {
		var msg string
		defer func() { done <- msg }()
		for depth := 60; depth < 69 && msg == ""; depth++ {
			nest(depth, func() {
				var want, buf [300]uintptr
				m := CallersFP(1, want[:])
				ShadowCallersEager(1, buf[:]) // patches our return slot
				self := runtime.FuncForPC(want[0] - 1)
				var first uintptr
				for o := range 17 {
					for i := range buf {
						buf[i] = ^uintptr(i)
					}
					n := ShadowCallers(1, buf[o:o+m+10])
					if f := runtime.FuncForPC(buf[o] - 1); o == 0 && f != nil && self != nil && f.Entry() == self.Entry() {
						first = buf[o]
					}
					if buf[o] != first || first == 0 {
						msg = fmt.Sprintf("depth %d, pcs at +%d words: entry 0 is %s, want the same return address into %s each time", depth, o, frames(buf[o:o+1]), frames(want[:1]))
						return
					}
					if n != m || !slices.Equal(buf[o+1:o+n], want[1:m]) {
						msg = fmt.Sprintf("depth %d, pcs at +%d words: %d frames, want %d\ngot:  %s\nwant: %s", depth, o, n, m, frames(buf[o+1:o+n]), frames(want[1:m]))
						return
					}
					for i, pc := range buf {
						if (i < o || i >= o+n) && pc != ^uintptr(i) {
							msg = fmt.Sprintf("depth %d, pcs at +%d words: word %d outside the %d frames written", depth, o, i, n)
							return
						}
					}
				}
				if cached, _ := ShadowStats(); cached < m-1 {
					msg = fmt.Sprintf("depth %d: %d frames cached, want %d: the copy was not tested", depth, cached, m-1)
				}
			})
			ShadowReset()
		}
	}()
	if msg := <-done; msg != "" {
		t.Fatal(msg)
	}
}

// TestShadowStackIDSkip checks ShadowStackID's skip against CallersFP's,
// and that StackPCs knows only IDs that ShadowStackID returned.
func TestShadowStackIDSkip(t *testing.T) {
	var a, b [256]uintptr
	for i := range 3 { // nothing cached, then cached
		id0 := ShadowStackID(0)
		n := StackPCs(id0, a[:])
		m := CallersFP(0, b[:])
		if n != m || n < 3 {
			t.Fatalf("round %d: ShadowStackID(0) has %d frames, CallersFP(0) %d", i, n, m)
		}
		if f := runtime.FuncForPC(a[0] - 1); f == nil || !strings.HasSuffix(f.Name(), "gostack.ShadowStackID") {
			t.Errorf("round %d: entry 0 of ShadowStackID(0) is %s, want a PC inside ShadowStackID", i, frames(a[:1]))
		}
		if !slices.Equal(a[2:n], b[2:m]) {
			t.Errorf("round %d: ShadowStackID(0) above the caller:\n%s\nCallersFP:\n%s", i, frames(a[2:n]), frames(b[2:m]))
		}
		id2 := ShadowStackID(2)
		if n2 := StackPCs(id2, a[:]); n2 != m-2 || !slices.Equal(a[1:n2], b[3:m]) {
			t.Errorf("round %d: ShadowStackID(2):\n%s\nCallersFP(0)[2:]:\n%s", i, frames(a[:n2]), frames(b[2:m]))
		}
		if id := ShadowStackID(1 << 20); id != 0 {
			t.Errorf("ShadowStackID beyond the root = %d, want 0", id)
		}
	}
	for _, id := range []uint64{0, 1 << 40, ^uint64(0)} {
		if n := StackPCs(id, a[:]); n != 0 {
			t.Errorf("StackPCs(%#x) = %d, want 0", id, n)
		}
	}
}
