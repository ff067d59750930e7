package stacks_test

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/output"
	"github.com/rewindstack/rewind/stacks"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// TestLiveTailCallsMatchGdb dumps testdata/tailcall.c (-O2: its
// functions end in jumps to the next) live with tail-call frames and
// inlined calls, and compares every thread with gdb's backtrace frame by
// frame, gdb's tail-call and inlined frames included: the same PCs, the
// same kinds, the same names (or aliases of them). The fixture has a
// unique chain (uq_b and uq_c shown), an ambiguous one (none shown), one
// whose two chains end alike (pa_h alone shown) and a jump made from a
// function inlined into the one that left (see gdbView); the main thread
// waits in pthread_join and another in sem_wait, which jump inside libc
// (libc6-dbg's call sites; sem_wait is reached through the program's
// PLT, its call site naming a declaration). The fixture is built with DWARF 5 (DW_TAG_call_site) and
// DWARF 4 (GNU extensions: DW_TAG_GNU_call_site, DW_AT_GNU_tail_call).
func TestLiveTailCallsMatchGdb(t *testing.T) {
	for _, dw := range []string{"-gdwarf-5", "-gdwarf-4"} {
		t.Run(dw[2:], func(t *testing.T) {
			t.Parallel()
			checkTailCallsAgainstGdb(t, dw)
		})
	}
}

func checkTailCallsAgainstGdb(t *testing.T, dwarfFlag string) {
	exe := filepath.Join(t.TempDir(), "tailcall")
	if out, err := exec.Command("gcc", "-O2", dwarfFlag, "-pthread", "-o", exe, "testdata/tailcall.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	proc := fixture.Start(t, exe)
	snap, err := live.Capture(proc.PID, live.Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkRunning(t, proc.PID)
	tg := snap.Target(&target.Objects{}, func(s string) { t.Log(s) })
	sym := &symbolize.Symbolizer{Inlines: true, TailCalls: true}
	rep := stacks.Unwind(tg, stacks.Options{Unwinder: unwind.NewAuto()}, sym)
	ref, err := fixture.GdbPID(t, proc.PID)
	if err != nil {
		t.Fatalf("gdb: %v", err)
	}
	checkRunning(t, proc.PID)

	var tails []string
	for _, st := range ref {
		got := findThread(rep, st.TID)
		if got == nil {
			t.Errorf("thread %d missing", st.TID)
			continue
		}
		view := gdbView(got)
		if !sameKinds(view, st) {
			t.Errorf("thread %d differs from gdb's frames:\n%s", st.TID, sideBySideKinds(view, st))
			continue
		}
		checkNames(t, "tail-calls", withoutClones(view), st, tg.Space, sym)
		for _, f := range got.Frames {
			if f.Method == unwind.MethodTailCall.String() {
				tails = append(tails, fixture.BaseName(f.Function))
			}
		}
	}
	// What gdb shows for the fixture's own functions, so that the test
	// cannot pass with no tail-call frame on either side: the tail-call
	// frames of the four chains, and none of the ambiguous ones (threads
	// in any order).
	var own, lib []string
	for _, fn := range tails {
		switch {
		case len(fn) > 3 && strings.Contains("uq_ am_ pa_ in_ lb_", fn[:3]):
			own = append(own, fn)
		default:
			lib = append(lib, fn)
		}
	}
	t.Logf("libc's tail-call frames: %q", lib)
	want := []string{"in_b", "in_helper", "lb_b", "pa_h", "uq_b", "uq_c"}
	slices.Sort(own)
	if !slices.Equal(own, want) {
		t.Errorf("the fixture's tail-call frames are %q, want %q", own, want)
	}
}

// TestLiveTailCallToLibraryWithoutDWARF: a jump to a library function
// (testdata/tailcall.c's lb_b to nanosleep, through the PLT) ends a chain
// even when the library has no debug information: the call site names a
// declaration, found by name in the library's symbol table, which is how
// gdb finds it (TestLiveTailCallsMatchGdb shows lb_b as gdb does, with
// libc's debug file).
func TestLiveTailCallToLibraryWithoutDWARF(t *testing.T) {
	exe := filepath.Join(t.TempDir(), "tailcall")
	if out, err := exec.Command("gcc", "-O2", "-g", "-pthread", "-o", exe, "testdata/tailcall.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	proc := fixture.Start(t, exe)
	snap, err := live.Capture(proc.PID, live.Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkRunning(t, proc.PID)
	tg := snap.Target(&target.Objects{}, func(s string) { t.Log(s) })
	sym := &symbolize.Symbolizer{DebugDirs: []string{}, Cache: symbolize.NewCache(), Inlines: true, TailCalls: true}
	rep := stacks.Unwind(tg, stacks.Options{Unwinder: unwind.NewAuto()}, sym)
	found := 0
	for _, th := range rep.Threads {
		for i, f := range th.Frames {
			if f.Function != "lb_b" {
				continue
			}
			found++
			if f.Method != unwind.MethodTailCall.String() || i == 0 || i+1 == len(th.Frames) ||
				!strings.Contains(th.Frames[i-1].Function, "nanosleep") || th.Frames[i+1].Function != "lb_a" {
				t.Errorf("thread %d: lb_b not a tail-call frame between nanosleep and lb_a:\n%s", th.TID, sideBySide(&th, fixture.Stack{}))
			}
		}
		for _, f := range th.Frames {
			if strings.Contains(f.Module, "libc") && f.File != "" {
				t.Fatalf("libc's debug information was read (%s at %s:%d)", f.Function, f.File, f.Line)
			}
		}
	}
	if found != 1 {
		t.Errorf("lb_b shown %d times, want once", found)
	}
}

// gdbView is a thread as gdb shows it: gdb makes one frame of a
// tail-call site, whose name is the innermost function there (its
// unwinder for tail calls runs before the one for inlined calls), so a
// jump made from in_helper, inlined into in_b, is shown as in_helper
// alone; rewind shows in_helper [inlined] then in_b [tail-call] at the
// same PC, as it does for any frame. Each such run becomes one frame
// named by its first entry.
func gdbView(th *output.Thread) *output.Thread {
	out := *th
	out.Frames = nil
	for i := 0; i < len(th.Frames); i++ {
		f := th.Frames[i]
		if f.Method == unwind.MethodTailCall.String() && f.Inlined {
			for i+1 < len(th.Frames) && th.Frames[i+1].PC == f.PC && th.Frames[i].Inlined {
				i++
			}
			f.Inlined = false
		}
		out.Frames = append(out.Frames, f)
	}
	return &out
}

// withoutClones is th with the suffixes of gcc's copies of functions
// (".constprop.0", ".isra.0", ".part.0", ".cold") cut off the names: the
// symbol table names the copy, DWARF (and gdb) the function.
func withoutClones(th *output.Thread) *output.Thread {
	out := *th
	out.Frames = slices.Clone(th.Frames)
	for i := range out.Frames {
		f := &out.Frames[i]
		for _, sfx := range []string{".constprop.", ".isra.", ".part.", ".cold"} {
			if j := strings.Index(f.Function, sfx); j > 0 {
				f.Function = f.Function[:j]
			}
		}
	}
	return &out
}

// sameKinds reports whether got has gdb's frames: the same PCs, inlined
// where gdb's are, tail calls where gdb's are.
func sameKinds(got *output.Thread, want fixture.Stack) bool {
	if len(got.Frames) != len(want.Frames) {
		return false
	}
	for i, w := range want.Frames {
		g := got.Frames[i]
		tail := g.Method == unwind.MethodTailCall.String() && !g.Inlined
		if g.PC != w.PC || g.Inlined != w.Inlined || tail != w.TailCall {
			return false
		}
	}
	return true
}

// sideBySideKinds is sideBySide with gdb's frame kinds shown.
func sideBySideKinds(got *output.Thread, want fixture.Stack) string {
	w := fixture.Stack{TID: want.TID, Err: want.Err}
	for _, f := range want.Frames {
		switch {
		case f.Inlined:
			f.Func += " [inlined]"
		case f.TailCall:
			f.Func += " [tail-call]"
		}
		w.Frames = append(w.Frames, f)
	}
	return sideBySide(got, w)
}
