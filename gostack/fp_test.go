package gostack

import (
	"flag"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

var long = flag.Bool("long", false, "also re-run the equivalence tests with -race and -gcflags=all=-l (slow: builds the standard library for the race detector)")

// TestFramePointersUsed fails when frame pointers are available but the
// start-up probe rejected them, which would silently turn Callers into
// runtime.Callers.
func TestFramePointersUsed(t *testing.T) {
	if !Supported {
		t.Skipf("no frame pointers on %s", runtime.GOARCH)
	}
	if !fpUsable() {
		t.Fatal("frame-pointer probe failed on a supported architecture")
	}
}

// TestCallersFPPhysical checks CallersFP against runtime.Callers on a
// stack with no inlined and no wrapper frames, where physical and logical
// frames are the same: the PCs must be identical, and the last one must be
// runtime.goexit.
func TestCallersFPPhysical(t *testing.T) {
	if !Supported {
		t.Skipf("no frame pointers on %s", runtime.GOARCH)
	}
	err := inGoroutine(func() error {
		return recurse(20, physicalLeaf)
	})
	if err != nil {
		t.Fatal(err)
	}
}

//go:noinline
func physicalLeaf() error {
	// skip 2 is physicalLeaf's caller in both captures (0 is
	// CallersFP or runtime.Callers, 1 the capture helper).
	for skip := 3; skip < 10; skip++ {
		phys := make([]uintptr, 64)
		rt := make([]uintptr, 64)
		n := capturePhysical(skip, phys)
		m := captureRuntime(skip, rt)
		if err := compareStacks(rt[:m], phys[:n]); err != nil {
			return err
		}
		last := runtime.FuncForPC(phys[n-1] - 1)
		if last == nil || last.Name() != "runtime.goexit" {
			return errorf("last physical frame is %v, want runtime.goexit", last)
		}
	}
	return nil
}

//go:noinline
func capturePhysical(skip int, pcs []uintptr) int { return CallersFP(skip, pcs) }

//go:noinline
func captureRuntime(skip int, pcs []uintptr) int { return runtime.Callers(skip, pcs) }

// TestBuildVariants re-runs the equivalence tests with the race detector
// and with inlining disabled everywhere (-long only).
func TestBuildVariants(t *testing.T) {
	if !*long {
		t.Skip("needs -long")
	}
	if os.Getenv("GOSTACK_CHILD") != "" {
		t.Skip("already a child run")
	}
	for _, flags := range [][]string{
		{"-race"},
		{"-gcflags=all=-l"},
		{"-race", "-gcflags=all=-l"},
	} {
		t.Run(strings.Join(flags, " "), func(t *testing.T) {
			args := append([]string{"test", "-count=1"}, flags...)
			args = append(args, "-run", "TestEquivalence|TestDepths|TestAllSkips|TestShortBuffers|TestConcurrent|TestCallersFPPhysical|TestFramePointersUsed", ".")
			cmd := exec.Command("go", args...)
			cmd.Env = append(os.Environ(), "GOSTACK_CHILD=1")
			out, err := cmd.CombinedOutput()
			t.Logf("go %s:\n%s", strings.Join(args, " "), out)
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSkipZero checks that frame 0 is the capturing function itself, as
// runtime.Callers' frame 0 is runtime.Callers, and frame 1 its caller.
func TestSkipZero(t *testing.T) {
	self := runtime.FuncForPC(reflectPC(TestSkipZero)).Name()
	for name, capture := range map[string]func([]uintptr) int{
		"github.com/rewindstack/rewind/gostack.Callers":   func(p []uintptr) int { return Callers(0, p) },
		"github.com/rewindstack/rewind/gostack.CallersFP": func(p []uintptr) int { return CallersFP(0, p) },
	} {
		pcs := make([]uintptr, 8)
		n := capture(pcs)
		fs := framesOf(pcs[:n])
		if Supported && (len(fs) < 3 || fs[0].Function != name || fs[2].Function != self) {
			t.Errorf("%s(0, ...) frames: %v; want %s, the closure, %s", name, fs, name, self)
		}
	}
}

func reflectPC(f any) uintptr { return reflect.ValueOf(f).Pointer() }
