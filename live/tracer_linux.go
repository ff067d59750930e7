package live

import (
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// tracer runs functions on one OS thread, the tracer of every thread any
// capture seizes. The kernel ties a tracee to the thread that attached it:
// ptrace requests and waits from any other thread fail with ESRCH, so all
// of them go through run.
//
// There is one tracer per process, started on first use, and its thread
// lives as long as the process: the serving goroutine locks itself to its
// thread and never returns. A tracer thread per capture, ended afterwards,
// would be a bad idea: a child started with Pdeathsig (as os/exec users
// often do) gets that signal when the thread that forked it exits, and
// the Go runtime may well have run that fork on the very thread a capture
// later locks. (The tests found this the hard way: their targets died.)
//
// Captures share the thread, one request at a time. Requests are short
// (WithStopped's callback runs on the caller's goroutine, not here).
type tracer struct {
	req chan func()
	// orphans are tracees that were interrupted but had not stopped when
	// their capture gave up on them (StopTimeout). A tracee can only be
	// detached once stopped, so the tracer polls them between requests
	// and detaches each as soon as it stops.
	orphans []orphan
	// raised: the thread runs at nice -20 now (see raise).
	raised bool
}

// orphan is a tracee left to the tracer by a finished capture.
type orphan struct {
	pid, tid int
	// noReap marks the main thread of a child of this process: when it
	// dies its parent reaps it, and waiting for it here would take the
	// exit status from the parent.
	noReap bool
}

var (
	theTracer     *tracer
	theTracerOnce sync.Once
)

// orphanPoll is how often the tracer looks at its orphans.
const orphanPoll = 5 * time.Millisecond

func getTracer() *tracer {
	theTracerOnce.Do(func() {
		theTracer = &tracer{req: make(chan func())}
		go theTracer.serve()
	})
	return theTracer
}

func (t *tracer) serve() {
	runtime.LockOSThread()
	// Never unlocked, and serve never returns: see the type's
	// documentation. The timer slack is per thread: lowering it (for the
	// short sleeps while collecting stops) affects no other goroutine.
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	tick := time.NewTicker(orphanPoll)
	tick.Stop()
	for {
		select {
		case f := <-t.req:
			f()
		case <-tick.C:
		}
		if len(t.orphans) > 0 {
			t.adoptOrphans()
			tick.Reset(orphanPoll)
			if len(t.orphans) == 0 {
				tick.Stop()
			}
		}
	}
}

// adoptOrphans detaches the orphans that have stopped and forgets those
// that have exited (reaping them: a dead tracee stays a zombie until its
// tracer waits for it).
func (t *tracer) adoptOrphans() {
	n := 0
	for _, o := range t.orphans {
		if !o.noReap {
			wpid, ws, err := wait4(o.tid)
			switch {
			case err != nil, wpid == o.tid && (ws.Exited() || ws.Signaled()):
				continue // gone (or no longer ours)
			case wpid == o.tid && ws.Stopped():
				sig := 0
				if uint32(ws)>>16 != unix.PTRACE_EVENT_STOP {
					sig = int(ws.StopSignal())
				}
				if ptraceDetach(o.tid, sig) == nil {
					continue
				}
			}
		} else if taskGone(o.pid, o.tid) || tracerOf(o.pid, o.tid) != unix.Gettid() {
			continue
		}
		// A detach succeeds on any stopped tracee, also one whose stop
		// was reported to another thread of this process.
		if sig, err := stopSignal(o.tid); err == nil && ptraceDetach(o.tid, sig) == nil {
			continue
		}
		t.orphans[n] = o
		n++
	}
	t.orphans = t.orphans[:n]
}

// isOrphan reports whether tid is one of the orphans. Tracer thread
// only.
func (t *tracer) isOrphan(tid int) bool {
	for _, o := range t.orphans {
		if o.tid == tid {
			return true
		}
	}
	return false
}

// run runs f on the tracer thread and returns once it is done. A panic in
// f is raised again in the caller (after f's own deferred calls ran on the
// tracer thread), and the tracer goes on serving.
func (t *tracer) run(f func()) {
	done := make(chan tracerPanic, 1)
	t.req <- func() {
		ok := false
		defer func() {
			if ok {
				done <- tracerPanic{}
			} else {
				done <- tracerPanic{v: recover(), panicked: true}
			}
		}()
		f()
		ok = true
	}
	if p := <-done; p.panicked {
		panic(p.v)
	}
}

type tracerPanic struct {
	v        any
	panicked bool
}

// raise puts the tracer's thread at nice -20 while threads of a target
// are stopped: they wait for this one while it copies and detaches, and
// on a busy machine a tracer that waits for a CPU stretches their pause
// (2 CPU-bound processes on 2 cores: median pause 2.5 ms at nice 0, 1.2
// ms at -20, worst of 20 dumps 7.9 vs 3.9 ms). Only this thread is
// raised, only where the caller may (root, CAP_SYS_NICE), and only while
// a thread is stopped: reading 2,000 threads left running in place
// takes the tracer tens of milliseconds, and at -20 it kept the target's
// own threads off a CPU for 3-4 ms at a time (issue 42's stall
// benchmark). It runs on the tracer's thread.
func (t *tracer) raise() {
	if !t.raised {
		t.raised = unix.Setpriority(unix.PRIO_PROCESS, 0, -20) == nil
	}
}

// lower undoes raise, back to the process's nice value.
func (t *tracer) lower() {
	if t.raised {
		t.raised = false
		unix.Setpriority(unix.PRIO_PROCESS, 0, processNice())
	}
}

// processNice is the nice value of the process (its main thread's, which
// the tracer's thread had before raise).
func processNice() int {
	// getpriority(2) returns 20 - nice.
	p, err := unix.Getpriority(unix.PRIO_PROCESS, unix.Getpid())
	if err != nil {
		return 0
	}
	return 20 - p
}
