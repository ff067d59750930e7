package dump

import "golang.org/x/sys/unix"

// threadID returns the calling thread's ID.
func threadID() int { return unix.Gettid() }

// schedIdle is SCHED_IDLE: the thread runs only on a CPU nothing else
// wants, and gives it up as soon as anything else does.
const schedIdle = 5

// setIdle puts thread tid in the SCHED_IDLE class (idle) or back in the
// normal one, reporting whether it could.
func setIdle(tid int, idle bool) bool {
	attr := unix.SchedAttr{Policy: 0} // SCHED_OTHER, nice 0
	if idle {
		attr.Policy = schedIdle
	}
	return unix.SchedSetAttr(tid, &attr, 0) == nil
}
