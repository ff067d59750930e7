package live

import (
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// helper is a second OS thread beside the tracer's, which never traces:
// it runs Options.During while the tracer reads the maps and copies the
// stacks, each on one CPU. Like the tracer's thread it lives as long as
// the process, raised in priority, asleep between captures (a thread
// that waits for a CPU on a busy machine stretches the pause).
//
// The hand-over is a futex, not a channel: a goroutine readied by a
// channel send from the tracer's goroutine waits in the tracer's run
// queue, and the tracer keeps its P through system call after system
// call, so the helper started only when the Go scheduler's monitor took
// that P away, half a millisecond later. A thread woken from a futex
// wait runs at once, and takes the idle P on its way out of the system
// call.
type helper struct {
	state    atomic.Uint32 // helperIdle, helperPosted, helperRunning, helperDone
	job      func()
	panicked bool
	panicV   any
}

const (
	helperIdle = iota
	helperPosted
	helperRunning
	helperDone
)

var (
	theHelper     *helper
	theHelperOnce sync.Once
)

// getHelper returns the helper, starting its thread on first use.
func getHelper() *helper {
	theHelperOnce.Do(func() {
		theHelper = &helper{}
		go theHelper.serve()
	})
	return theHelper
}

func (h *helper) serve() {
	runtime.LockOSThread() // never unlocked: see tracer
	unix.Setpriority(unix.PRIO_PROCESS, 0, -20)
	for {
		// The tracer takes a job back that the helper has not begun
		// (start), so the helper takes it with a compare-and-swap.
		for {
			v := h.state.Load()
			if v == helperPosted && h.state.CompareAndSwap(helperPosted, helperRunning) {
				break
			}
			if v != helperPosted {
				futexWait(&h.state, v)
			}
		}
		h.runJob()
		h.state.Store(helperDone)
		futexWake(&h.state)
	}
}

func (h *helper) runJob() {
	h.panicked = true
	defer func() {
		if h.panicked {
			h.panicV = recover()
		}
	}()
	h.job()
	h.panicked = false
}

// start has f run on the helper thread, and returns the function that
// waits until it is done and raises again a panic of f; calls after the
// first do nothing. When the helper has not begun f by then (it waits for
// a CPU: another process runs on the other one), that function runs f
// itself instead, so the pause is never longer than without the helper
// by more than a futex wake. One job at a time: the tracer thread, which
// alone calls start, waits for each (on every path: the wait function is
// deferred).
func (h *helper) start(f func()) (wait func()) {
	h.job = f
	h.state.Store(helperPosted)
	futexWake(&h.state)
	waited := false
	return func() {
		if waited {
			return
		}
		waited = true
		if h.state.CompareAndSwap(helperPosted, helperIdle) {
			h.job = nil
			f()
			return
		}
		for h.state.Load() != helperDone {
			futexWait(&h.state, helperRunning)
		}
		h.job = nil
		h.state.Store(helperIdle)
		if h.panicked {
			p := h.panicV
			h.panicV = nil
			panic(p)
		}
	}
}

// FUTEX_WAIT and FUTEX_WAKE, with FUTEX_PRIVATE_FLAG (128).
const (
	futexWaitPrivate = 0 | 128
	futexWakePrivate = 1 | 128
)

// futexWait sleeps while *w holds val (or until woken).
func futexWait(w *atomic.Uint32, val uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWaitPrivate, uintptr(val), 0, 0, 0)
}

// futexWake wakes the thread sleeping on w.
func futexWake(w *atomic.Uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWakePrivate, 1, 0, 0, 0)
}
