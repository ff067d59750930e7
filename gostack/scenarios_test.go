package gostack

import (
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"testing"
)

// Every scenario runs code shaped a certain way and calls here (through its
// own chain of calls) at the point to capture; here compares Callers and
// CallersFP+Expand with runtime.Callers for a range of skips.

const defaultSkips = 12

// --- plain and inlined calls -------------------------------------------

//go:noinline
func recurse(depth int, leaf func() error) error {
	if depth <= 1 {
		return leaf()
	}
	return recurse(depth-1, leaf)
}

// inlinedA, inlinedB and inlinedC are small enough to be inlined: the call
// in inlinedC is a physical call from the function they are inlined into.
func inlinedA(leaf func() error) error { return inlinedB(leaf) }
func inlinedB(leaf func() error) error { return inlinedC(leaf) }
func inlinedC(leaf func() error) error { return leaf() }

//go:noinline
func notInlined(leaf func() error) error { return inlinedA(leaf) }

// recurseInlined alternates physical and inlined frames.
//
//go:noinline
func recurseInlined(depth int, leaf func() error) error {
	if depth <= 1 {
		return inlinedA(leaf)
	}
	return inlinedStep(depth, leaf)
}

func inlinedStep(depth int, leaf func() error) error { return recurseInlined(depth-1, leaf) }

func hereDefault() error { return here(defaultSkips) }

// --- methods, interfaces, generics -----------------------------------------

type valueRecv struct{ n int }

//go:noinline
func (v valueRecv) Value(leaf func() error) error { return leaf() }

func (v valueRecv) InlinedValue(leaf func() error) error { return leaf() }

type ptrRecv struct{ n int }

//go:noinline
func (p *ptrRecv) Ptr(leaf func() error) error { return leaf() }

type caller interface{ Value(func() error) error }

type embedding struct{ valueRecv }

//go:noinline
func generic[T any](x T, leaf func() error) error {
	_ = fmt.Sprint(x)
	return leaf()
}

func genericInlined[T comparable](x, y T, leaf func() error) error {
	if x == y {
		return leaf()
	}
	return leaf()
}

type genericType[T any] struct{ v T }

//go:noinline
func (g *genericType[T]) Method(leaf func() error) error { return leaf() }

// --- panics --------------------------------------------------------------

type panicErr struct{ err error }

//go:noinline
func panicWith(v any) { panic(v) }

// recoverInto recovers a panic and runs leaf inside the deferred function,
// while the panic is still in progress (the stack holds runtime.gopanic).
//
//go:noinline
func deferredCaptureDuringPanic(leaf func() error) (err error) {
	defer func() {
		err = leaf()
		if r := recover(); r == nil {
			err = errors.New("no panic recovered")
		}
	}()
	panicWith("boom")
	return errors.New("unreachable")
}

//go:noinline
func recoverThenCapture(leaf func() error) error {
	func() {
		defer func() { _ = recover() }()
		panicWith("boom")
	}()
	return leaf() // after recovery: the stack was unwound and restored
}

var nilPtr *ptrRecv

//go:noinline
func faultAndCapture(leaf func() error) (err error) {
	defer func() {
		err = leaf()
		if r := recover(); r == nil {
			err = errors.New("no panic recovered")
		}
	}()
	_ = nilPtr.n // nil dereference: runtime.sigpanic
	return errors.New("unreachable")
}

type valuer interface{ Value(func() error) error }

// nilValuer hides the dynamic type from the compiler, which would otherwise
// call valueRecv.Value directly (and fault on the nil pointer itself).
//
//go:noinline
func nilValuer() valuer { return (*valueRecv)(nil) }

// panicwrapCapture calls a value method through a nil pointer in an
// interface: the compiler's (*valueRecv).Value wrapper calls
// runtime.panicwrap, and runtime.Callers shows that wrapper frame.
//
//go:noinline
func panicwrapCapture(leaf func() error) (err error) {
	defer func() {
		err = leaf()
		if r := recover(); r == nil {
			err = errors.New("no panic recovered")
		}
	}()
	return nilValuer().Value(leaf)
}

//go:noinline
func deferCapture(leaf func() error) (err error) {
	defer func() { err = leaf() }()
	return nil
}

//go:noinline
func deferLoopCapture(leaf func() error) (err error) {
	// A defer in a loop is not open-coded: runtime.deferreturn runs it.
	for i := 0; i < 2; i++ {
		defer func() {
			if e := leaf(); e != nil {
				err = e
			}
		}()
	}
	return nil
}

// --- stacks that move ----------------------------------------------------

//go:noinline
func bigFrames(depth int) int {
	var pad [512]byte
	pad[depth%len(pad)] = byte(depth)
	if depth == 0 {
		return int(pad[0])
	}
	return bigFrames(depth-1) + int(pad[depth%len(pad)])
}

// growThenCapture captures, grows the goroutine stack far beyond its
// initial size (so the runtime copies it), and captures again from deep
// inside and after returning.
//
//go:noinline
func growThenCapture(leaf func() error) error {
	if err := leaf(); err != nil {
		return err
	}
	_ = bigFrames(200) // 200 × >512 bytes: several stack copies
	if err := recurse(30, func() error { bigFrames(100); return leaf() }); err != nil {
		return err
	}
	return leaf()
}

// inGoroutine runs f on a new goroutine and waits for it.
func inGoroutine(f func() error) error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return <-ch
}

type scenario struct {
	name string
	run  func(leaf func() error) error
}

func scenarios() []scenario {
	return []scenario{
		{"leaf", func(leaf func() error) error { return leaf() }},
		{"notInlined", notInlined},
		{"inlined", func(leaf func() error) error { return inlinedA(leaf) }},
		{"recurse3", func(leaf func() error) error { return recurse(3, leaf) }},
		{"recurseInlined7", func(leaf func() error) error { return recurseInlined(7, leaf) }},
		{"closure", func(leaf func() error) error {
			x := 1
			f := func() error { x++; return leaf() }
			return f()
		}},
		{"closureNested", func(leaf func() error) error {
			return func() error {
				return func() error { return notInlined(leaf) }()
			}()
		}},
		{"valueMethod", func(leaf func() error) error { return valueRecv{}.Value(leaf) }},
		{"inlinedValueMethod", func(leaf func() error) error { return valueRecv{}.InlinedValue(leaf) }},
		{"ptrMethod", func(leaf func() error) error { return (&ptrRecv{}).Ptr(leaf) }},
		{"interfaceValue", func(leaf func() error) error {
			var c caller = valueRecv{}
			return c.Value(leaf)
		}},
		{"interfacePtrToValue", func(leaf func() error) error {
			// (*valueRecv).Value is a compiler-generated wrapper.
			var c caller = &valueRecv{}
			return c.Value(leaf)
		}},
		{"embeddedPromoted", func(leaf func() error) error {
			var c caller = &embedding{}
			return c.Value(leaf)
		}},
		{"methodValue", func(leaf func() error) error {
			f := valueRecv{}.Value // valueRecv.Value-fm wrapper
			return f(leaf)
		}},
		{"methodExpr", func(leaf func() error) error { return (*ptrRecv).Ptr(&ptrRecv{}, leaf) }},
		{"generic", func(leaf func() error) error { return generic(42, leaf) }},
		{"genericString", func(leaf func() error) error { return generic("s", leaf) }},
		{"genericInlined", func(leaf func() error) error { return genericInlined(1, 2, leaf) }},
		{"genericMethod", func(leaf func() error) error { return (&genericType[string]{}).Method(leaf) }},
		{"defer", deferCapture},
		{"deferLoop", deferLoopCapture},
		{"duringPanic", deferredCaptureDuringPanic},
		{"afterRecover", recoverThenCapture},
		{"duringSigpanic", faultAndCapture},
		{"panicwrap", panicwrapCapture},
		{"goexitDefer", func(leaf func() error) error {
			ch := make(chan error, 1)
			go func() {
				defer func() { ch <- leaf() }()
				runtime.Goexit()
			}()
			return <-ch
		}},
		{"reflectCall", func(leaf func() error) error {
			out := reflect.ValueOf(notInlined).Call([]reflect.Value{reflect.ValueOf(leaf)})
			err, _ := out[0].Interface().(error)
			return err
		}},
		{"reflectMakeFunc", func(leaf func() error) error {
			var f func() error
			reflect.ValueOf(&f).Elem().Set(reflect.MakeFunc(reflect.TypeOf(f), func([]reflect.Value) []reflect.Value {
				err := leaf()
				return []reflect.Value{reflect.ValueOf(&err).Elem()}
			}))
			return f()
		}},
		{"goroutineClosure", func(leaf func() error) error { return inGoroutine(leaf) }},
		{"goroutineFunc", func(leaf func() error) error {
			ch := make(chan error, 1)
			go goEntry(leaf, ch)
			return <-ch
		}},
		{"goroutineMethod", func(leaf func() error) error {
			ch := make(chan error, 1)
			go (&ptrRecv{}).goEntry(leaf, ch) // go statement wrapper
			return <-ch
		}},
		{"goroutineGeneric", func(leaf func() error) error {
			ch := make(chan error, 1)
			go goEntryGeneric(7, leaf, ch)
			return <-ch
		}},
		{"stackGrowth", func(leaf func() error) error { return inGoroutine(func() error { return growThenCapture(leaf) }) }},
	}
}

//go:noinline
func goEntry(leaf func() error, ch chan<- error) { ch <- leaf() }

//go:noinline
func (p *ptrRecv) goEntry(leaf func() error, ch chan<- error) { ch <- leaf() }

//go:noinline
func goEntryGeneric[T any](x T, leaf func() error, ch chan<- error) {
	_ = x
	ch <- leaf()
}

// TestEquivalence runs every scenario with the capture directly at the
// leaf and below an inlined chain, and compares with runtime.Callers.
func TestEquivalence(t *testing.T) {
	if !Supported {
		t.Logf("no frame pointers on %s: Callers is runtime.Callers", runtime.GOARCH)
	}
	leaves := map[string]func() error{
		"direct":  hereDefault,
		"inlined": func() error { return inlinedA(hereDefault) },
	}
	for _, sc := range scenarios() {
		for lname, leaf := range leaves {
			t.Run(sc.name+"/"+lname, func(t *testing.T) {
				before := fallbacksSoFar()
				if err := sc.run(leaf); err != nil {
					t.Fatal(err)
				}
				fell := fallbacksSoFar() - before
				t.Logf("%d of the captures fell back to runtime.Callers", fell)
				if Supported && sc.name != "duringSigpanic" && fell != 0 {
					t.Errorf("%d captures fell back to runtime.Callers; want the frame-pointer path", fell)
				}
				if Supported && sc.name == "duringSigpanic" && fell == 0 {
					t.Errorf("no capture fell back during a sigpanic")
				}
			})
		}
	}
}

// TestDepths compares at stack depths 1 to 1024, with physical frames only
// and with an inlined frame in every other physical frame.
func TestDepths(t *testing.T) {
	leaf := func() error { return here(3) }
	for _, d := range []int{1, 2, 3, 4, 5, 8, 16, 31, 32, 33, 64, 100, 128, 256, 500, 512, 1000, 1024} {
		t.Run(fmt.Sprintf("plain/%d", d), func(t *testing.T) {
			if err := recurse(d, leaf); err != nil {
				t.Fatal(err)
			}
		})
		t.Run(fmt.Sprintf("inlined/%d", d), func(t *testing.T) {
			if err := recurseInlined(d, leaf); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestAllSkips walks skip over the whole stack of one inlined-heavy
// scenario, so skip lands on every kind of frame, and checks that a skip
// past the end gives 0.
func TestAllSkips(t *testing.T) {
	err := recurseInlined(5, func() error {
		return inlinedA(func() error { return here(64) })
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := Callers(10000, make([]uintptr, 8)); n != 0 {
		t.Errorf("Callers with a huge skip returned %d PCs", n)
	}
	if n := Callers(0, nil); n != 0 {
		t.Errorf("Callers with no room returned %d", n)
	}
}

// TestShortBuffers checks that a buffer shorter than the stack gets the
// same prefix as runtime.Callers, including a cut inside an inlined group.
func TestShortBuffers(t *testing.T) {
	err := recurseInlined(6, func() error {
		return inlinedA(func() error {
			for size := 1; size <= 20; size++ {
				if err := checkCaptures(captureAll(6, size)); err != nil {
					return fmt.Errorf("buffer of %d: %v", size, err)
				}
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestConcurrent captures from many goroutines at once while the cache
// fills (run it with -race).
func TestConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				if err := recurseInlined(1+(g*7+i)%40, func() error { return here(2) }); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
