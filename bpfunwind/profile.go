package bpfunwind

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/rewindstack/rewind/profiles"
	"github.com/rewindstack/rewind/unwind"
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
	u.describeStale(stacks)
	for _, i := range u.byGen(stacks) {
		s := stacks[i]
		u.mu.Lock()
		latest, fed := u.gen[s.PID], fedTo[s.PID]
		// A stack is named with the description its walk used, fed at
		// a time of its own just before t (a nanosecond per newer
		// description), so that the collector replays it between them.
		gen, maps := latest, u.procMaps[s.PID]
		if old, ok := u.history[s.PID][u.genOf(&s)]; ok {
			gen, maps = u.genOf(&s), old
		}
		at := t - min(uint64(latest-gen), t)
		thread := [2]int{s.PID, s.TID}
		comm, named := u.comms[s.PID], namedTo[thread]
		if gen != fed {
			fedTo[s.PID] = gen
		}
		namedTo[thread] = true
		u.mu.Unlock()
		if gen != fed {
			if fed == 0 {
				col.AddMappings(s.PID, maps)
			} else {
				col.AddMappingsAt(s.PID, at, maps)
			}
		}
		if !named {
			col.AddComm(s.PID, s.TID, threadComm(s.PID, s.TID, comm))
		}
		value, count := s.Value, int(s.Events)
		if !s.OffCPU {
			value = s.Value * max(periodNS, 1)
		}
		end := s.End.String()
		if s.GoSwitch > 0 {
			// The fidelity table's kernel row counts the walks that
			// crossed a Go stack switch on g0 at the goroutine's
			// saved registers ("root+go-stack-switch"), as package
			// unwind marks the frames it finds so.
			end += "+" + unwind.MethodGoSwitch.String()
		}
		if s.RowsPending {
			// Frame pointers stood in for a file's rows not loaded
			// yet: the fidelity table counts the samples that waited.
			end += "+" + RowsPendingMark
		}
		if len(s.User) == 0 {
			end = ""
		}
		smp := col.AddStack(s.PID, s.TID, at, value, count, s.User, s.Kernel, end)
		smp.Interp = s.Interp
	}
}

// byGen returns the order Feed takes stacks in: the stacks of each
// process by the description their walks used, oldest first (walks that
// used none, and those whose description is forgotten, with the newest).
func (u *Unwinder) byGen(stacks []Stack) []int {
	idx := make([]int, len(stacks))
	for i := range idx {
		idx[i] = i
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	key := func(s *Stack) int {
		if g := u.genOf(s); u.history[s.PID][g] != nil {
			return g
		}
		return u.gen[s.PID]
	}
	sorted := true
	for i := 1; i < len(stacks) && sorted; i++ {
		a, b := &stacks[i-1], &stacks[i]
		sorted = a.PID != b.PID || key(a) <= key(b)
	}
	if !sorted {
		sort.SliceStable(idx, func(i, j int) bool {
			a, b := &stacks[idx[i]], &stacks[idx[j]]
			if a.PID != b.PID {
				return a.PID < b.PID
			}
			return key(a) < key(b)
		})
	}
	return idx
}

// genOf returns the description a stack is named with: the one its walk
// used, or for a walk made after its description was dropped (a mapping
// replaced), the next one. Its lock held.
func (u *Unwinder) genOf(s *Stack) int {
	if s.Gen&genStale != 0 {
		return s.Gen&^genStale + 1
	}
	return s.Gen
}

// describeStale describes again, before their stacks are fed, the
// processes some of whose stacks were walked after their description
// was dropped, when the program has not asked for it yet.
func (u *Unwinder) describeStale(stacks []Stack) {
	var pids []int
	u.mu.Lock()
	for i := range stacks {
		s := &stacks[i]
		if s.Gen&genStale != 0 && s.Gen&^genStale >= u.gen[s.PID] && !u.exited[s.PID] && !u.exitedBefore[s.PID] {
			pids = append(pids, s.PID)
		}
	}
	u.mu.Unlock()
	done := map[int]bool{}
	for _, pid := range pids {
		if !done[pid] {
			done[pid] = true
			u.Describe(pid)
		}
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
		u.forgetInterp(pid)
		delete(u.procMaps, pid)
		delete(u.described, pid)
		delete(u.gen, pid)
		delete(u.history, pid)
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
