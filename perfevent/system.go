package perfevent

import (
	"fmt"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rewindstack/rewind/internal/tracefs"
	"github.com/rewindstack/rewind/perfdata"
)

// Scope says which threads a continuous recording (rewind agent) samples.
type Scope struct {
	// PIDs, when set, are the processes sampled (with their threads and
	// children created later); otherwise every process of the host is.
	PIDs []int
	// Cgroup, when set (and PIDs is not), is a cgroup directory (e.g.
	// /sys/fs/cgroup/system.slice/foo.service) whose tasks alone are
	// sampled.
	Cgroup string
}

// ClockID is the clock continuous recordings stamp their records with:
// CLOCK_MONOTONIC, so that a record's time can be compared with the
// agent's own clock (see Now).
const ClockID = unix.CLOCK_MONOTONIC

// Now returns the current time of ClockID in nanoseconds.
func Now() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(ClockID, &ts)
	return uint64(ts.Nano())
}

// OpenScope starts sampling the threads of scope with opt's cpu-clock
// event, per CPU (system-wide or one cgroup) or per process, with records
// stamped by ClockID. Counting starts at once.
func OpenScope(scope Scope, opt Options) (*Recorder, error) {
	if err := opt.fill(); err != nil {
		return nil, err
	}
	attr := Attr(opt)
	return openScope(attr, scope, opt)
}

// SwitchAttr returns the attribute of the sched_switch tracepoint event
// off-CPU profiles are recorded with: every switch, the raw tracepoint
// fields, and the switched-out thread's user registers and stack copy.
func SwitchAttr(opt Options, tracepointID uint64) *perfdata.Attr {
	a := Attr(opt)
	a.Type = perfdata.TypeTracepoint
	a.Config = tracepointID
	a.SamplePeriod = 1
	a.Flags &^= perfdata.FlagFreq | perfdata.FlagExcludeKernel // the tracepoint fires in the kernel
	if opt.UserOnly {
		a.Flags |= perfdata.FlagExcludeCCKern
	}
	a.SampleType |= perfdata.SampleRaw
	return a
}

// OpenSwitches records the context switches of scope's threads (those
// that block them only, for PIDs: see blockingOnly) with the
// sched_switch tracepoint (see SwitchAttr). It needs the tracepoint's id
// from tracefs and, system-wide, CAP_PERFMON or root.
func OpenSwitches(scope Scope, opt Options) (*Recorder, error) {
	if err := opt.fill(); err != nil {
		return nil, err
	}
	id, err := TracepointID("sched", "sched_switch")
	if err != nil {
		return nil, err
	}
	return openScope(SwitchAttr(opt, id), scope, opt)
}

// blockingFilters are tracepoint filters, best first, that keep only the
// sched_switch records of threads that block: a thread preempted while
// running (prev_state 0, or 0x100 "R+" preempted in the kernel) is not
// off CPU, and on a busy host such switches outnumber the blocking ones
// many times, each with its stack copy. "&" needs Linux 4.x; "!=" is as
// old as tracepoint filters.
var blockingFilters = []string{"prev_state & 255", "prev_state != 0"}

// blockingOnly sets, on r's sched_switch events, the first filter of
// blockingFilters the kernel takes. It is for recordings of chosen threads
// only, which see a thread's switches out and never its own switches in
// (one is seen when another recorded thread switches out to it, and is
// missed when that thread was preempted: the blocked time then runs to
// the thread's next blocking switch, as when no other recorded thread ran
// on its CPU). Per CPU, every switch is needed to know when a blocked
// thread runs again. An event that takes no filter records every switch,
// which costs more but means the same.
func (r *Recorder) blockingOnly() {
	if len(r.fds) == 0 {
		return
	}
	for _, f := range blockingFilters {
		if setFilter(r.fds[0], f) != nil {
			continue
		}
		for _, fd := range r.fds[1:] {
			setFilter(fd, f)
		}
		return
	}
}

func setFilter(fd int, filter string) error {
	b, err := unix.BytePtrFromString(filter)
	if err != nil {
		return err
	}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.PERF_EVENT_IOC_SET_FILTER, uintptr(unsafe.Pointer(b)))
	if errno != 0 {
		return errno
	}
	return nil
}

func openScope(attr *perfdata.Attr, scope Scope, opt Options) (*Recorder, error) {
	attr.Flags |= perfdata.FlagUseClockID
	attr.ClockID = ClockID
	switch {
	case len(scope.PIDs) > 0:
		var evs []eventTarget
		for _, pid := range scope.PIDs {
			tids, err := threadsOf(pid)
			if err != nil {
				return nil, err
			}
			for _, t := range tids {
				evs = append(evs, eventTarget{pid: t, cpu: -1})
			}
		}
		r, err := openEvents(attr, evs, opt)
		if err != nil {
			return nil, err
		}
		if attr.Type == perfdata.TypeTracepoint {
			r.blockingOnly()
		}
		return r, r.Enable()
	case scope.Cgroup != "":
		fd, err := unix.Open(scope.Cgroup, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return nil, fmt.Errorf("cgroup %s: %w", scope.Cgroup, err)
		}
		defer unix.Close(fd)
		return openPerCPU(attr, eventTarget{pid: fd, cgroup: true}, opt)
	}
	return openPerCPU(attr, eventTarget{pid: -1}, opt)
}

// openPerCPU opens and enables one event like et on every online CPU: the
// whole system (pid -1) or a cgroup. Inheritance does not apply there.
func openPerCPU(attr *perfdata.Attr, et eventTarget, opt Options) (*Recorder, error) {
	attr.Flags &^= perfdata.FlagInherit
	cpus, err := onlineCPUs()
	if err != nil {
		return nil, err
	}
	evs := make([]eventTarget, 0, len(cpus))
	for _, c := range cpus {
		et.cpu = c
		evs = append(evs, et)
	}
	r, err := openEvents(attr, evs, opt)
	if err != nil {
		return nil, err
	}
	return r, r.Enable()
}

// TracepointID reads a tracepoint's event id from tracefs, mounting
// tracefs first when it is not mounted and this process may, as perf does
// (see package tracefs); the error says what is missing and how to get
// it.
func TracepointID(group, name string) (uint64, error) {
	b, err := tracefs.ReadEventFile(group, name, "id")
	if err != nil {
		return 0, err
	}
	id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("tracepoint %s:%s: %q is not an event id", group, name, b)
	}
	return id, nil
}
