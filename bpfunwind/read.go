package bpfunwind

import (
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Errors counts what the program could not count since it was loaded.
type Errors struct {
	CountsFull  uint64 // adds refused: the period's count map was full
	StacksFull  uint64 // stacks not kept (the stacks map refused them)
	OffCPUFull  uint64 // blocked intervals not timed: the start map was full
	NoticesLost uint64 // notices the ring buffer had no room for
	KStacksFull uint64 // kernel stacks not kept (the period's kernel-stack map had no room)
}

// Errors reads the program's error counters.
func (u *Unwinder) Errors() Errors {
	var e [5]uint64
	for i := range e {
		u.objs.Errors.Lookup(uint32(i), &e[i])
	}
	return Errors{e[0], e[1], e[2], e[3], e[4]}
}

// KStacksReused returns how many off-CPU kernel stacks the program took
// from its kernel-stack cache instead of walking them (see kcache in
// bpf/unwind.bpf.c).
func (u *Unwinder) KStacksReused() uint64 {
	var per []uint64
	if u.objs.Kreused.Lookup(uint32(0), &per) != nil {
		return 0
	}
	var n uint64
	for _, v := range per {
		n += v
	}
	return n
}

// SwapGrace is how long Read waits after switching the program to the
// other count map before reading the one it left: programs that looked the
// old map up before the switch finish within microseconds (they run with
// preemption or migration disabled). An add that still lands later is
// not lost: it stays in that map and is read with it two periods later.
const SwapGrace = 5 * time.Millisecond

// Read switches the program to the other count map, then reads and empties
// the one it counted in, and returns its stacks. Each count is taken with
// an atomic lookup-and-delete, so none is read twice or dropped.
//
// The program counts a blocked interval when it ends, whole: a thread
// blocked across the switch would be counted in the next period only,
// and one blocked for minutes in one period. So Read also credits the
// intervals still running at the switch (the program's start map) with
// their time up to it, and takes what it credited off their counts when
// they end, in a later period: each period holds the time threads spent
// blocked during it. (An interval that ends in the few milliseconds
// between the switch and this read moves that credit by one period.)
func (u *Unwinder) Read() ([]Stack, error) {
	u.forgetExited()
	var cfg config
	if err := u.objs.Config.Lookup(uint32(0), &cfg); err != nil {
		return nil, err
	}
	old := u.countsMap(cfg.Active)
	cfg.Active ^= 1
	cfg.Period++
	u.active = cfg.Active
	if err := u.objs.Config.Update(uint32(0), cfg, ebpf.UpdateAny); err != nil {
		return nil, err
	}
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) // the program's clock (bpf_ktime_get_ns)
	swap := uint64(ts.Nano())
	// The intervals still running are taken at once: one that ends
	// between the switch and this look is counted whole in the next
	// period (its time before the switch with it).
	split := u.offOn && cfg.MinBlock == 0 // blocked intervals split at the swap
	var running []offRunning
	if split {
		running = u.runningIntervals()
	}
	time.Sleep(SwapGrace)
	var keys []countKey
	var k countKey
	var v countVal
	it := old.Iterate()
	for it.Next(&k, &v) {
		keys = append(keys, k)
	}
	counts := make(map[countKey]countVal, len(keys))
	order := keys[:0] // the keys still there, in the same order
	for _, k := range keys {
		if err := old.LookupAndDelete(&k, &v); err != nil {
			continue
		}
		counts[k] = v
		order = append(order, k)
	}
	if split {
		order = u.splitIntervals(counts, order, running, swap)
	}
	var out []Stack
	kstacks := map[kstackRef][]uint64{}
	var sv stackVal
	ir := u.interpReader()
	defer ir.done()
	for _, k := range order {
		v := counts[k]
		s := Stack{PID: int(k.PID), TID: int(k.TID), Value: v.Value, Events: v.Events, OffCPU: k.Kind&0xff == kindOffCPU, End: EndKernelThread}
		if k.Stack != 0 {
			if err := u.objs.Stacks.Lookup(k.Stack, &sv); err == nil {
				n := min(int(sv.N), MaxFrames)
				s.User = append([]uint64(nil), sv.PCs[:n]...)
				s.FP, s.End, s.Gen, s.GoSwitch = sv.FPMask, End(sv.End), int(sv.Gen), int(sv.GoJump)
				s.RowsPending = sv.NoRows != 0
				s.Interp = ir.stacks(s.PID, k.Stack)
			} else {
				s.End = EndStackLost
			}
		}
		if k.KStack >= 0 {
			ref := kstackRef{k.Kind&kstacks1 != 0, k.KStack}
			ks, ok := kstacks[ref]
			if !ok {
				var raw [127]uint64
				if err := u.kstackMap(ref.one).Lookup(uint32(k.KStack), &raw); err == nil {
					for _, pc := range raw {
						if pc == 0 {
							break
						}
						ks = append(ks, pc)
					}
				}
				kstacks[ref] = ks
			}
			s.Kernel = ks
		}
		out = append(out, s)
	}
	u.lastPrune[0], u.lastPrune[1] = u.pruneKStacks(cfg.Active^1 == 1)
	return out, nil
}

// countVal is a count map's value.
type countVal struct{ Value, Events uint64 }

// offStart is the program's record of a blocked interval (struct
// offstart): when it began and what it will be counted under.
type offStart struct {
	TS  uint64
	Key countKey
}

// credit is what Read credited to an interval still running.
type credit struct {
	ts, upto uint64 // the interval's start; credited up to here
}

// owed is time credited to periods before a count's interval ended, to be
// taken off the count.
type owed struct {
	ns    uint64
	reads int // reads since it was last added to or taken from
}

// owedReads is how many reads a debt waits for its count: an interval
// whose thread exited is never counted.
const owedReads = 4

// splitIntervals takes the time credited earlier off the counts of
// intervals that ended, and credits the intervals still running at swap
// with their time since they began or were last credited; it returns the
// keys of counts, with those it added.
func (u *Unwinder) splitIntervals(counts map[countKey]countVal, order []countKey, running []offRunning, swap uint64) []countKey {
	for k, o := range u.owed {
		if v, ok := counts[k]; ok {
			take := min(o.ns, v.Value)
			v.Value -= take
			counts[k] = v
			o.ns -= take
			o.reads = 0
		} else {
			o.reads++
		}
		if o.ns == 0 || o.reads > owedReads {
			delete(u.owed, k)
		}
	}
	seen := make(map[uint32]credit, len(running))
	for _, r := range running {
		order = u.creditInterval(counts, order, seen, r.tid, r.st, swap)
	}
	u.credited = seen
	return order
}

// offRunning is an entry of the program's start map: a thread blocked.
type offRunning struct {
	tid uint32
	st  offStart
}

// runningIntervals returns the intervals the program's start map holds.
// The program changes the map meanwhile: an iteration it aborted is made
// again (an entry met twice is credited once).
func (u *Unwinder) runningIntervals() []offRunning {
	var out []offRunning
	var tid uint32
	var st offStart
	for try := 0; try < 3; try++ {
		out = out[:0]
		it := u.objs.Offcpu.Iterate()
		for it.Next(&tid, &st) {
			out = append(out, offRunning{tid, st})
		}
		if it.Err() == nil {
			break
		}
	}
	return out
}

// creditInterval credits one interval still running at swap.
func (u *Unwinder) creditInterval(counts map[countKey]countVal, order []countKey, seen map[uint32]credit, tid uint32, st offStart, swap uint64) []countKey {
	if st.Key.Kind&0xff != kindOffCPU || st.TS >= swap {
		return order
	}
	from := st.TS
	if c, ok := seen[tid]; ok && c.ts == st.TS {
		return order // credited by an earlier try
	}
	if c, ok := u.credited[tid]; ok && c.ts == st.TS {
		from = max(from, c.upto)
	}
	seen[tid] = credit{st.TS, swap}
	if swap <= from {
		return order
	}
	d := swap - from
	v, ok := counts[st.Key]
	if !ok {
		order = append(order, st.Key)
	}
	v.Value += d
	counts[st.Key] = v
	o := u.owed[st.Key]
	if o == nil {
		o = &owed{}
		u.owed[st.Key] = o
	}
	o.ns += d
	o.reads = 0
	return order
}

func (u *Unwinder) countsMap(i uint32) *ebpf.Map {
	if i == 1 {
		return u.objs.Counts1
	}
	return u.objs.Counts0
}
