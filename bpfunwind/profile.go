package bpfunwind

import (
	"fmt"
	"os"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/rewindstack/rewind/profiles"
)

// Trace adds a process to the traced ones (with Options.Filter), and
// describes it: record starts its command after the program is attached,
// then traces it; the processes it starts are traced by the program.
func (u *Unwinder) Trace(pid int) error {
	one := uint8(1)
	if err := u.objs.Pids.Update(uint32(pid), one, ebpf.UpdateAny); err != nil {
		return err
	}
	return u.Describe(pid)
}

// Feed hands stacks read at time t (perf clock nanoseconds) to a profile
// collector, the same one stack copies go to, so that symbolization and
// every output are shared: each process's mappings (again after it was
// described anew), then every stack as a finished sample
// (profiles.Collector.AddStack). An on-CPU stack's count n is weighted
// n*periodNS nanoseconds; an off-CPU stack's value is its time off CPU.
func (u *Unwinder) Feed(col *profiles.Collector, stacks []Stack, t, periodNS uint64) {
	for _, s := range stacks {
		u.mu.Lock()
		gen, fed := u.gen[s.PID], u.fed[s.PID]
		thread := [2]int{s.PID, s.TID}
		maps, comm, named := u.procMaps[s.PID], u.comms[s.PID], u.named[thread]
		if gen != fed {
			u.fed[s.PID] = gen
		}
		u.named[thread] = true
		u.mu.Unlock()
		if gen != fed {
			col.AddMappings(s.PID, maps)
		}
		if !named {
			col.AddComm(s.PID, s.TID, threadComm(s.PID, s.TID, comm))
		}
		value, count := s.Value, int(s.Events)
		if !s.OffCPU {
			value = s.Value * max(periodNS, 1)
		}
		end := s.End.String()
		if len(s.User) == 0 {
			end = ""
		}
		smp := col.AddStack(s.PID, s.TID, t, value, count, s.User, s.Kernel, end)
		smp.Interp = s.Interp
	}
	u.forgetExited()
}

// forgetExited drops what is kept of the processes that exited (their
// last stacks were just fed), so that a long-running agent keeps bounded
// state.
func (u *Unwinder) forgetExited() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.exited) == 0 {
		return
	}
	for pid := range u.exited {
		u.forgetPython(pid)
		delete(u.procMaps, pid)
		delete(u.gen, pid)
		delete(u.fed, pid)
		delete(u.comms, pid)
	}
	for th := range u.named {
		if u.exited[th[0]] {
			delete(u.named, th)
		}
	}
	clear(u.exited)
}

// threadComm names a thread: its own name while it runs, else its
// process's when it was described.
func threadComm(pid, tid int, comm string) string {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/comm", pid, tid)); err == nil {
		return strings.TrimSpace(string(b))
	}
	return comm
}
