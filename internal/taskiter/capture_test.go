package taskiter

import (
	"fmt"
	"testing"
	"time"

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

// spinner has 4 threads blocked on a lock and one that spins.
const spinner = `
import threading
lock = threading.Lock()
lock.acquire()
ts = [threading.Thread(target=lock.acquire) for _ in range(4)]
def spin():
    while True:
        pass
ts.append(threading.Thread(target=spin))
for t in ts:
    t.start()
print("ready", flush=True)
lock.acquire()
`

// TestRunningStoppedLast: in a capture reading blocked threads in place,
// a thread that runs is stopped after the others were read and resumed
// as soon as its stack is copied: it alone is stopped, with a stack, and
// the pause is the time it was stopped.
func TestRunningStoppedLast(t *testing.T) {
	testingRoot(t)
	it, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	cmd, _, _ := startPlain(t, "/usr/bin/python3", "-c", spinner)
	pid := cmd.Process.Pid
	snap, err := live.Capture(pid, live.Options{BlockedThreads: it.Blocked})
	if err != nil {
		t.Fatal(err)
	}
	stopped := 0
	var longest time.Duration
	for _, th := range snap.Threads {
		if th.Err != nil {
			t.Errorf("thread %d: %v", th.TID, th.Err)
			continue
		}
		if len(th.Stack.Data) == 0 {
			t.Errorf("thread %d: no stack", th.TID)
		}
		if !th.Asleep {
			stopped++
			longest = max(longest, th.Stopped)
		}
	}
	// The GIL may also wake the main thread or a waiter now and then.
	if stopped < 1 || snap.Phases.Woke < 1 || len(snap.Threads) != 6 {
		t.Fatalf("%d of %d threads stopped, %d woke; want the spinner stopped", stopped, len(snap.Threads), snap.Phases.Woke)
	}
	if snap.Pause != longest || snap.Pause <= 0 {
		t.Errorf("pause %v, longest a thread was stopped %v: want them equal", snap.Pause, longest)
	}
}
