package stacks_test

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/rewindstack/rewind/internal/fixture"
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
// unique chain (uq_b and uq_c shown), an ambiguous one (none shown) and
// one whose two chains end alike (pa_h alone shown); the main thread
// waits in pthread_join, which tail-calls inside libc (libc6-dbg's call
// sites). The fixture is built with DWARF 5 (DW_TAG_call_site) and
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

	tails := map[string]int{}
	for _, st := range ref {
		got := findThread(rep, st.TID)
		if got == nil || !sameKinds(got, st) {
			t.Errorf("thread %d differs from gdb's frames:\n%s", st.TID, sideBySideKinds(got, st))
			continue
		}
		checkNames(t, "tail-calls", got, st, tg.Space, sym)
		for _, f := range got.Frames {
			if f.Method == unwind.MethodTailCall.String() {
				tails[fixture.BaseName(f.Function)]++
			}
		}
	}
	// What gdb shows for the fixture's own functions, so that the test
	// cannot pass with no tail-call frame on either side.
	for _, fn := range []string{"uq_c", "uq_b", "pa_h"} {
		if tails[fn] != 1 {
			t.Errorf("%s: %d tail-call frames, want 1", fn, tails[fn])
		}
	}
	for _, fn := range []string{"am_e", "am_f", "am_g", "pa_e", "pa_f", "pa_g"} {
		if tails[fn] != 0 {
			t.Errorf("%s: %d tail-call frames, want none (ambiguous)", fn, tails[fn])
		}
	}
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
