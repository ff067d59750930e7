package live

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/target"
)

// Threads left asleep (Options.LeaveAsleep).
//
// A thread blocked in the kernel runs no instruction of the process until
// it is scheduled again, and the kernel counts each time a thread is
// scheduled (the third field of /proc/PID/task/TID/schedstat, bumped as
// the thread is switched in, before it runs). A thread whose count, read
// first, is the same after During as before, and that
// /proc/PID/task/TID/syscall (which names the call only of a thread
// blocked off its CPU) found blocked in between, did not run from that
// look until During ended: During read what it would have read with the
// thread stopped. Stopping such a thread wakes it to enter the ptrace
// stop, and on a busy machine a woken thread waits for a CPU: a pause is
// mostly that wait (on 2 loaded CPUs, a millisecond a wake-up on average
// as schedstat's run delay counts it). A thread that did run meanwhile is
// stopped then, and During called again (restopWoken).

// leaveSleepers returns the threads of tids to seize: those not seen
// before that Options.LeaveAsleep does not leave asleep. The others are
// recorded as left asleep.
func (s *session) leaveSleepers(tids []int) []int {
	if s.leaveAsleep == nil && s.blocked == nil || s.want != nil {
		return tids
	}
	if s.blocked != nil {
		return s.leaveBlocked(tids)
	}
	var seize []int
	for _, tid := range tids {
		if s.byTID[tid] == nil {
			// The count first, then the look that finds the thread
			// blocked: a run between the two changes the count.
			if n, ok := schedCount(s.pid, tid); ok {
				if t, ok := blockedIn(s.pid, tid); ok && s.leaveAsleep(t) {
					th := &tstate{tid: tid, asleep: true, pcount: n, regs: regs.New(hostArch)}
					th.regs.Set(hostArch.PC(), t.PC)
					th.regs.Set(hostArch.SP(), t.SP)
					s.leave(th)
					continue
				}
			}
		}
		seize = append(seize, tid)
	}
	return seize
}

// leave records th as left asleep.
func (s *session) leave(th *tstate) {
	s.threads = append(s.threads, th)
	s.byTID[th.tid] = th
	s.asleepN++
}

// leaveBlocked is leaveSleepers with Options.BlockedThreads: every thread
// it reports blocked (that LeaveAsleep, when set, leaves) is left asleep
// with its whole register set, its stack copied as a stopped thread's.
// Without During and LeaveAsleep the others are stopped only after that
// (as threads that woke), each for no longer than its own copy.
func (s *session) leaveBlocked(tids []int) []int {
	counts := make(map[int]uint64, len(tids))
	for _, tid := range tids {
		if s.byTID[tid] == nil {
			if n, ok := schedCount(s.pid, tid); ok {
				counts[tid] = n
			}
		}
	}
	var blocked map[int]BlockedThread
	if len(counts) > 0 {
		// After the counts: a run between the two changes the count.
		bs, err := s.blocked(s.pid)
		if err == nil {
			blocked = make(map[int]BlockedThread, len(bs))
			for _, b := range bs {
				blocked[b.TID] = b
			}
		}
	}
	var seize []int
	for _, tid := range tids {
		n, ok := counts[tid]
		b, blk := blocked[tid]
		if ok && blk && b.Regs.Arch == hostArch {
			pc, _ := b.Regs.PC()
			sp, _ := b.Regs.SP()
			if s.leaveAsleep == nil || s.leaveAsleep(AsleepThread{TID: tid, Syscall: b.Syscall, SP: sp, PC: pc}) {
				s.leave(&tstate{tid: tid, asleep: true, full: true, pcount: n, regs: b.Regs, tp: b.TP})
				continue
			}
		}
		if ok && s.during == nil && s.leaveAsleep == nil {
			// Running (or about to run): stopped after the others were
			// read, and resumed as soon as copied (restopWoken), not
			// held stopped while 2,000 blocked threads are read.
			s.leave(&tstate{tid: tid, asleep: true, woke: true, pcount: n})
			s.wokeN++
			continue
		}
		seize = append(seize, tid)
	}
	return seize
}

// checkAsleep marks the threads left asleep that have been scheduled
// since they were found asleep (or are gone), and those During asked for
// stopped (Reader.Stop). It runs as During returns.
func (s *session) checkAsleep(want map[int]bool) {
	if s.asleepN == 0 {
		return
	}
	t := time.Now()
	for _, th := range s.threads {
		if th.asleep && !th.woke {
			if n, ok := schedCount(s.pid, th.tid); !ok || n != th.pcount || want[th.tid] {
				th.woke = true
				s.wokeN++
			}
		}
	}
	s.checked += time.Since(t)
}

// restopWoken stops the threads left asleep that ran before During ended
// (checkAsleep), copies their stacks as the others', and calls During
// again, until it returns with none of those still left asleep having
// run. The pause, if no thread was stopped before, begins here.
func (s *session) restopWoken() {
	for {
		woke := 0
		var round []*tstate
		for _, th := range s.threads {
			if !th.woke {
				continue
			}
			woke++
			th.woke, th.asleep, th.full = false, false, false
			s.asleepN--
			th.regs, th.tp = regs.Regs{}, 0
			th.copied, th.stack = false, target.Region{}
			if err := s.seizeThread(th.tid); err != nil {
				th.err = err
				continue
			}
			th.attached = true
			round = append(round, th)
		}
		if woke == 0 {
			return
		}
		if len(round) > 0 {
			// No staggering here: During is called below, once.
			maxPause := s.maxPause
			s.maxPause = 0
			s.interrupt(round)
			s.collect(round)
			s.maxPause = maxPause
			if !s.mapsRead || !s.stacksMapped() {
				s.readMaps()
			}
			s.copyStacks()
			s.copySwitched()
		}
		if s.during == nil {
			// No During: nothing is read across threads, and each
			// thread left asleep was checked blocked from its
			// registers' read to after its stack's copy. Those just
			// stopped are resumed now, not held while 2,000 other
			// threads are checked again (12 ms of schedstat reads that
			// stalled them); the pause is then the longest any was
			// stopped.
			s.release()
			s.releasedEarly = true
			return
		}
		s.duringRan = false
		s.runDuring()
	}
}

// schedCount returns how many times thread tid has been scheduled
// (schedstat's third field); false when that is unknown (no such thread,
// or a kernel without CONFIG_SCHED_INFO, which prints zeros).
func schedCount(pid, tid int) (uint64, bool) {
	var buf [128]byte
	b, err := readProcFile(fmt.Sprintf("/proc/%d/task/%d/schedstat", pid, tid), buf[:0])
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return 0, false
	}
	n, err := strconv.ParseUint(f[2], 10, 64)
	if err != nil || n == 0 {
		return 0, false
	}
	return n, true
}

// blockedIn reads /proc/PID/task/TID/syscall: false when the thread is
// running or runnable ("running"), or unreadable.
func blockedIn(pid, tid int) (AsleepThread, bool) {
	var buf [256]byte
	b, err := readProcFile(fmt.Sprintf("/proc/%d/task/%d/syscall", pid, tid), buf[:0])
	if err != nil {
		return AsleepThread{}, false
	}
	f := strings.Fields(string(b))
	// "NR ARG1 ... ARG6 SP PC", or "-1 SP PC" blocked outside a call.
	if len(f) != 9 && len(f) != 3 {
		return AsleepThread{}, false
	}
	nr, err1 := strconv.Atoi(f[0])
	sp, err2 := strconv.ParseUint(f[len(f)-2], 0, 64)
	pc, err3 := strconv.ParseUint(f[len(f)-1], 0, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return AsleepThread{}, false
	}
	return AsleepThread{TID: tid, Syscall: nr, SP: sp, PC: pc}, true
}
