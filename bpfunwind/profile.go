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
	u.mu.Lock()
	if u.fed[col] == nil {
		u.fed[col] = map[int]int{}
		u.named[col] = map[[2]int]bool{}
	}
	fedTo, namedTo := u.fed[col], u.named[col]
	u.mu.Unlock()
	for _, s := range stacks {
		u.mu.Lock()
		gen, fed := u.gen[s.PID], fedTo[s.PID]
		thread := [2]int{s.PID, s.TID}
		maps, comm, named := u.procMaps[s.PID], u.comms[s.PID], namedTo[thread]
		if gen != fed {
			fedTo[s.PID] = gen
		}
		namedTo[thread] = true
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
}

// forgetExited drops what is kept of the processes that exited before
// the previous Read (their last stacks were fed since), so that a
// long-running agent keeps bounded state. Read calls it.
func (u *Unwinder) forgetExited() {
	u.mu.Lock()
	defer u.mu.Unlock()
	gone := u.exitedBefore
	u.exitedBefore, u.exited = u.exited, map[int]bool{}
	for pid := range gone {
		u.forgetPython(pid)
		delete(u.procMaps, pid)
		delete(u.described, pid)
		delete(u.gen, pid)
		delete(u.comms, pid)
		for _, fed := range u.fed {
			delete(fed, pid)
		}
	}
	for _, named := range u.named {
		for th := range named {
			if gone[th[0]] {
				delete(named, th)
			}
		}
	}
}

// threadComm names a thread: its own name while it runs, else its
// process's when it was described.
func threadComm(pid, tid int, comm string) string {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/comm", pid, tid)); err == nil {
		return strings.TrimSpace(string(b))
	}
	return comm
}
