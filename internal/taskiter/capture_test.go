package taskiter

import (
	"fmt"
	"testing"

	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/stacks"
	"github.com/rewindstack/rewind/unwind"
)

// TestCaptureBlocked: a capture given the blocked threads' registers
// (live.Options.BlockedThreads) stops none of a process whose threads
// are all blocked, and every thread unwinds to the frames a capture that
// stops them finds, with the same thread pointer.
func TestCaptureBlocked(t *testing.T) {
	testingRoot(t)
	it, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	p := startPark(t)
	walk := func(opt live.Options) (map[int]string, *live.Snapshot) {
		snap, err := live.Capture(p.PID, opt)
		if err != nil {
			t.Fatal(err)
		}
		u, _ := unwind.ByName("auto")
		out := map[int]string{}
		for _, w := range stacks.Walk(snap.Target(nil, nil), stacks.Options{Unwinder: u}) {
			s := ""
			for _, f := range w.Stack.Frames {
				s += fmt.Sprintf(" %#x", f.PC)
			}
			out[w.TID] = s + " " + w.Stack.End.String()
		}
		return out, snap
	}
	stopped, ssnap := walk(live.Options{})
	free, fsnap := walk(live.Options{BlockedThreads: it.Blocked})
	if fsnap.Pause != 0 {
		t.Errorf("pause %v, want none: every thread is blocked", fsnap.Pause)
	}
	tps := map[int]uint64{}
	for _, th := range ssnap.Threads {
		tps[th.TID] = th.TP
	}
	for _, th := range fsnap.Threads {
		if !th.Asleep {
			t.Errorf("thread %d was stopped", th.TID)
		}
		if th.TP != tps[th.TID] {
			t.Errorf("thread %d: TP %#x, stopped %#x", th.TID, th.TP, tps[th.TID])
		}
	}
	if len(free) != 4 || len(stopped) != 4 {
		t.Fatalf("%d and %d threads walked, want 4", len(free), len(stopped))
	}
	for tid, s := range stopped {
		if free[tid] != s {
			t.Errorf("thread %d:\nnot stopped:%s\nstopped:    %s", tid, free[tid], s)
		}
	}
}
