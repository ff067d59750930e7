package live

import (
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// A process that execs while it is being captured: the exec'ing thread
// holds the process's cred_guard_mutex and waits, in de_thread, until
// every other thread is gone; those it kills that are tracees of this
// process stay zombies until their tracer reaps them. PTRACE_SEIZE waits
// for that mutex, so a seize of any thread of the process then waits
// for the exec, which waits for the tracer, which is in the seize: the
// capture and the target both hung for good (found by reading a process
// that execs itself in a loop). While a seize takes long, another thread
// of this process (any thread of a tracer's process may wait for its
// tracees) reaps the zombie tracees of the process, and the exec, then
// the seize, go on.

// seizeWatch is how long a seize takes before the zombies are reaped.
const seizeWatch = 2 * time.Millisecond

// seizeGuarded is ptraceSeize with zombie tracees reaped meanwhile when
// it waits (see above). It runs on the tracer thread.
func (s *session) seizeGuarded(tid int) error {
	var done atomic.Bool
	tracer := unix.Gettid()
	pid, keep := s.pid, 0
	if s.ourChild {
		keep = s.pid // its status is its parent's (see poll)
	}
	t := time.AfterFunc(seizeWatch, func() { reapZombieTracees(pid, tracer, keep, &done) })
	err := ptraceSeize(tid)
	done.Store(true)
	t.Stop()
	return err
}

// reapZombieTracees reaps, until done, the threads of process pid that
// are zombies traced by thread tracer, except keep.
func reapZombieTracees(pid, tracer, keep int, done *atomic.Bool) {
	for !done.Load() {
		tids, err := listTasks(pid)
		if err != nil {
			return
		}
		for _, tid := range tids {
			if tid == keep {
				continue
			}
			st, err := readStat(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
			if err != nil || st.state != 'Z' || tracerOf(pid, tid) != tracer {
				continue
			}
			// A zombie reports nothing else: only its exit is taken.
			wait4(tid)
		}
		time.Sleep(time.Millisecond)
	}
}
