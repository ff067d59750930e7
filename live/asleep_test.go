package live

import (
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestLeaveAsleep captures a process whose threads all sleep, with
// Options.LeaveAsleep leaving every one: none is seized or stopped (During
// sees them untraced, asleep), the snapshot lists them as left asleep
// with the PC and SP of their system call, the pause is zero, and During
// reads the process once.
func TestLeaveAsleep(t *testing.T) {
	tg := startTarget(t, false, compileC(t, "sleepers"), "3")
	tids := waitAllState(t, tg.pid, "S", 5*time.Second)
	if _, ok := schedCount(tg.pid, tg.pid); !ok {
		t.Skip("no /proc/PID/task/TID/schedstat (CONFIG_SCHED_INFO): every thread is stopped")
	}
	// Threads the kernel reschedules for reasons of its own (none here:
	// the process sleeps in pause and a condition variable) would be
	// stopped and read again; a few tries allow for a stray wake-up.
	var snap *Snapshot
	calls, left := 0, 0
	for try := 0; try < 5; try++ {
		calls, left = 0, 0
		var err error
		snap, err = Capture(tg.pid, Options{
			LeaveAsleep: func(AsleepThread) bool { left++; return true },
			During: func(r *Reader) {
				calls++
				ts, _ := tasks(tg.pid)
				for _, x := range ts {
					if x.tracer != 0 {
						t.Errorf("during: thread %d traced by %d, want none", x.tid, x.tracer)
					}
				}
				for _, th := range r.Threads() {
					if !th.Asleep {
						t.Errorf("during: thread %d not marked asleep", th.TID)
					}
				}
				var b [8]byte
				if err := r.ReadMemory(snapRSP(t, tg.pid), b[:]); err != nil {
					t.Errorf("during: reading the process: %v", err)
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		if snap.Phases.Woke == 0 {
			break
		}
		t.Logf("try %d: %d threads ran during the read", try, snap.Phases.Woke)
	}
	if calls != 1 || snap.Phases.Woke != 0 {
		t.Fatalf("During called %d times, %d threads woke", calls, snap.Phases.Woke)
	}
	if left != len(tids) || snap.Phases.Asleep != len(tids) || len(snap.Threads) != len(tids) {
		t.Errorf("%d threads offered, %d left asleep, %d in the snapshot; the process has %d", left, snap.Phases.Asleep, len(snap.Threads), len(tids))
	}
	if snap.Pause != 0 || snap.StopWait != 0 {
		t.Errorf("pause %v, stop wait %v with no thread stopped", snap.Pause, snap.StopWait)
	}
	for _, th := range snap.Threads {
		pc, okPC := th.Regs.PC()
		sp, okSP := th.Regs.SP()
		if !th.Asleep || th.Err != nil || !okPC || !okSP || pc == 0 || sp == 0 || len(th.Stack.Data) != 0 {
			t.Errorf("thread %d: asleep %v, err %v, pc %#x sp %#x, %d stack bytes", th.TID, th.Asleep, th.Err, pc, sp, len(th.Stack.Data))
		}
	}
	checkReleased(t, tg.pid, "S")
}

// snapRSP returns the SP of pid's main thread as its syscall file says.
func snapRSP(t *testing.T, pid int) uint64 {
	t.Helper()
	a, ok := blockedIn(pid, pid)
	if !ok {
		t.Fatalf("thread %d is not blocked", pid)
	}
	return a.SP
}

// TestLeaveAsleepWoken wakes, from During, a thread left asleep (a
// SIGUSR1 to one of sigcount's sleepers): the capture finds that it ran,
// stops it, copies its stack and calls During again, which sees it
// stopped; the signal is handled once, not lost.
func TestLeaveAsleepWoken(t *testing.T) {
	tg := startTarget(t, true, compileC(t, "sigcount"))
	tids := waitAllState(t, tg.pid, "S", 5*time.Second)
	if _, ok := schedCount(tg.pid, tg.pid); !ok {
		t.Skip("no /proc/PID/task/TID/schedstat (CONFIG_SCHED_INFO)")
	}
	var target int
	for _, tid := range tids {
		if tid != tg.pid {
			target = tid
		}
	}
	before, _ := schedCount(tg.pid, target)
	calls := 0
	var second []StoppedThread
	snap, err := Capture(tg.pid, Options{
		// The main thread ticks every millisecond: stopped.
		LeaveAsleep: func(a AsleepThread) bool { return a.TID != tg.pid },
		During: func(r *Reader) {
			calls++
			if calls == 1 {
				unix.Tgkill(tg.pid, target, unix.SIGUSR1)
				// Until the thread has run its handler.
				for end := time.Now().Add(time.Second); time.Now().Before(end); {
					if n, ok := schedCount(tg.pid, target); !ok || n != before {
						break
					}
					time.Sleep(100 * time.Microsecond)
				}
				return
			}
			second = append(second[:0], r.Threads()...)
		}})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 || snap.Phases.Woke < 1 {
		t.Fatalf("During called %d times, %d threads woke; want 2 calls, the signalled thread woken", calls, snap.Phases.Woke)
	}
	for _, th := range second {
		if th.TID == target && th.Asleep {
			t.Errorf("second During: thread %d still marked asleep", target)
		}
	}
	th := snap.Thread(target)
	if th == nil || th.Asleep || th.Err != nil || len(th.Stack.Data) == 0 {
		t.Fatalf("woken thread in the snapshot: %+v", th)
	}
	if snap.Pause <= 0 {
		t.Errorf("pause %v with threads stopped", snap.Pause)
	}
	checkReleased(t, tg.pid, "S")
	timeout := time.After(5 * time.Second)
	for last := ""; last != strconv.Itoa(1); {
		select {
		case l, ok := <-tg.lines:
			if !ok {
				t.Fatalf("program ended; last count %q", last)
			}
			last = l
		case <-timeout:
			t.Fatalf("the program handled %s signals, 1 was sent", last)
		}
	}
}

// TestLeaveAsleepStopAsked: During asks for a thread left asleep to be
// stopped (Reader.Stop, as a goroutine dump does for a thread it finds
// running a goroutine): the capture stops it, copies its stack and calls
// During again with it stopped.
func TestLeaveAsleepStopAsked(t *testing.T) {
	tg := startTarget(t, false, compileC(t, "sleepers"), "3")
	tids := waitAllState(t, tg.pid, "S", 5*time.Second)
	if _, ok := schedCount(tg.pid, tg.pid); !ok {
		t.Skip("no /proc/PID/task/TID/schedstat (CONFIG_SCHED_INFO)")
	}
	var target int
	for _, tid := range tids {
		if tid != tg.pid {
			target = tid
		}
	}
	calls := 0
	var second []StoppedThread
	snap, err := Capture(tg.pid, Options{
		LeaveAsleep: func(AsleepThread) bool { return true },
		During: func(r *Reader) {
			calls++
			if calls == 1 {
				r.Stop(target)
				return
			}
			second = append(second[:0], r.Threads()...)
		}})
	if err != nil {
		t.Fatal(err)
	}
	if calls < 2 {
		t.Fatalf("During called %d times, want again after Stop", calls)
	}
	asleep := 0
	for _, th := range second {
		if th.TID == target && th.Asleep {
			t.Errorf("second During: thread %d, asked for, still asleep", th.TID)
		}
		if th.Asleep {
			asleep++
		}
	}
	// (The others stay asleep unless the kernel woke one of them for
	// its own reasons: said, not failed.)
	t.Logf("second During: %d of %d threads still asleep", asleep, len(second))
	th := snap.Thread(target)
	if th == nil || th.Asleep || th.Err != nil || len(th.Stack.Data) == 0 {
		t.Fatalf("the thread asked for, in the snapshot: %+v", th)
	}
	checkReleased(t, tg.pid, "S")
}
