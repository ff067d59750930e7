package live

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDuring checks Options.During, which runs on the helper thread (or
// on the tracer's, when the helper has not begun it in time): it runs
// once, while every thread is in a ptrace stop of this process, reads
// the stopped process through its Reader, and a panic in it is raised
// again by Capture after the threads were resumed. The SIGCHLD action
// carries SA_NOCLDSTOP during the capture only.
func TestDuring(t *testing.T) {
	tg := threadsTarget(t)
	var before kernelSigaction
	if err := rtSigaction(int(unix.SIGCHLD), nil, &before); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		calls := 0
		var during kernelSigaction
		snap, err := Capture(tg.pid, Options{During: func(r *Reader) {
			calls++
			rtSigaction(int(unix.SIGCHLD), nil, &during)
			ts, _ := tasks(tg.pid)
			for _, x := range ts {
				if x.state != 't' || tgidOf(x.tracer) != os.Getpid() {
					t.Errorf("during: thread %d in state %c traced by %d, want t by %d", x.tid, x.state, x.tracer, os.Getpid())
				}
			}
			if len(r.Threads()) != len(ts) {
				t.Errorf("during: %d threads, the process has %d", len(r.Threads()), len(ts))
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		if calls != 1 {
			t.Errorf("capture %d: During called %d times", i, calls)
		}
		if before.handler > 1 && during.flags&saNoCLDStop == 0 {
			t.Errorf("capture %d: SIGCHLD flags %#x during the capture, want SA_NOCLDSTOP", i, during.flags)
		}
		// The stacks copied beside During are those of a capture without
		// it.
		for _, th := range snap.Threads {
			if th.Err != nil || len(th.Stack.Data) == 0 {
				t.Errorf("capture %d: thread %d: %v, %d stack bytes", i, th.TID, th.Err, len(th.Stack.Data))
			}
		}
		var after kernelSigaction
		rtSigaction(int(unix.SIGCHLD), nil, &after)
		if after != before {
			t.Errorf("capture %d: SIGCHLD action %+v after the capture, %+v before", i, after, before)
		}
		checkReleased(t, tg.pid, "S")
	}

	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want During's panic", r)
			}
		}()
		Capture(tg.pid, Options{During: func(*Reader) { panic("boom") }})
		t.Errorf("Capture returned after During panicked")
	}()
	checkReleased(t, tg.pid, "S")
	// The helper serves the next capture.
	calls := 0
	if _, err := Capture(tg.pid, Options{During: func(*Reader) { calls++ }}); err != nil || calls != 1 {
		t.Errorf("after a panic: %v, During called %d times", err, calls)
	}
	checkReleased(t, tg.pid, "S")
}
