package perfevent

import (
	"slices"

	"golang.org/x/sys/unix"

	"github.com/rewindstack/rewind/perfdata"
)

// The stack copy of a sample is the top StackSize bytes of the user stack:
// a walk that needs more ends at the copy's edge. Programs differ (a
// depth-500 recursion needs 60 KB, most threads 2-8 KB) and copying more
// costs every sample, so a recording starts small and grows the copy
// when a process's samples show they need it: a sample whose copy is
// full (the kernel copied all it was asked for, so the stack goes on
// beyond it) is one that may be cut.

// MaxStackSize is the largest stack copy the kernel makes per sample.
const MaxStackSize = 65528

// Growth thresholds: a process whose samples of the last window are at
// least growMinSamples, growShare of them with a full copy, gets a copy
// twice as large (up to MaxStackSize).
const (
	growMinSamples = 20
	growShare      = 0.05
)

// copyStats counts one process's samples and full copies in the current
// window.
type copyStats struct{ samples, full int }

// noteCopy counts a sample's stack copy for growth.
func (r *Recorder) noteCopy(s *perfdata.Sample) {
	if r.stackSize == 0 || r.stackSize >= MaxStackSize {
		return
	}
	if r.copies == nil {
		r.copies = map[int]*copyStats{}
	}
	c := r.copies[int(s.PID)]
	if c == nil {
		c = &copyStats{}
		r.copies[int(s.PID)] = c
	}
	c.samples++
	if len(s.Stack) >= r.stackSize {
		c.full++
	}
}

// StackSize returns the bytes of user stack copied per sample now.
func (r *Recorder) StackSize() int { return r.stackSize }

// GrowStack decides, from the samples read since its last call, whether
// some process needs a larger stack copy and if so gives it one: events
// copying twice as much (up to MaxStackSize) are opened on every thread
// of the processes sampled in that window, and the old events are
// disabled (their buffered records are still read). It returns the new
// size and the process that asked for it, or 0 when nothing changed.
// Call it from the goroutine that calls Read, every second or so.
func (r *Recorder) GrowStack() (size, pid int, err error) {
	window := r.copies
	r.copies = nil
	if r.closed || r.stackSize == 0 || r.stackSize >= MaxStackSize {
		return 0, 0, nil
	}
	var pids []int
	for p, c := range window {
		pids = append(pids, p)
		if pid == 0 && c.samples >= growMinSamples && float64(c.full) >= growShare*float64(c.samples) {
			pid = p
		}
	}
	if pid == 0 {
		return 0, 0, nil
	}
	slices.Sort(pids)
	size = min(2*r.stackSize, MaxStackSize)
	if err := r.reopen(size, pids); err != nil {
		return 0, 0, err
	}
	return size, pid, nil
}

// reopen opens events copying size bytes of stack on every thread of
// pids, then disables the events opened before. Threads created while it
// works are caught by a rescan after the old events are disabled.
func (r *Recorder) reopen(size int, pids []int) error {
	opt := r.opt
	opt.StackSize = size
	opt.Warn = nil
	if r.attr.Flags&perfdata.FlagExcludeKernel != 0 {
		opt.UserOnly = true
	}
	old := slices.Clone(r.fds)
	opened := map[int]bool{}
	disabled := false
	for round := 0; round < 10; round++ {
		var fresh []int
		for _, p := range pids {
			tids, err := threadsOf(p)
			if err != nil {
				continue // exited
			}
			for _, t := range tids {
				if !opened[t] {
					opened[t] = true
					fresh = append(fresh, t)
				}
			}
		}
		if len(fresh) > 0 {
			nr, err := open(fresh, opt, false)
			if err == nil {
				err = nr.Enable()
				r.merge(nr)
			}
			if err != nil && !disabled {
				return err // the old events still run: nothing is lost
			}
		}
		if !disabled {
			for _, fd := range old {
				unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0)
			}
			disabled = true
			continue // threads created meanwhile inherited only old events
		}
		if len(fresh) == 0 {
			break
		}
	}
	r.stackSize = size
	return nil
}
