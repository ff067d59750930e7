package bpfunwind

import (
	"time"

	"github.com/cilium/ebpf"
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

// SwapGrace is how long Read waits after switching the program to the
// other count map before reading the one it left: programs that looked the
// old map up before the switch finish within microseconds (they run with
// preemption or migration disabled). An add that still lands later is
// not lost: it stays in that map and is read with it two periods later.
const SwapGrace = 5 * time.Millisecond

// Read switches the program to the other count map, then reads and empties
// the one it counted in, and returns its stacks. Each count is taken with
// an atomic lookup-and-delete, so none is read twice or dropped.
func (u *Unwinder) Read() ([]Stack, error) {
	u.forgetExited()
	var cfg config
	if err := u.objs.Config.Lookup(uint32(0), &cfg); err != nil {
		return nil, err
	}
	old := u.countsMap(cfg.Active)
	cfg.Active ^= 1
	u.active = cfg.Active
	if err := u.objs.Config.Update(uint32(0), cfg, ebpf.UpdateAny); err != nil {
		return nil, err
	}
	time.Sleep(SwapGrace)
	var keys []countKey
	var k countKey
	var v struct{ Value, Events uint64 }
	it := old.Iterate()
	for it.Next(&k, &v) {
		keys = append(keys, k)
	}
	var out []Stack
	kstacks := map[kstackRef][]uint64{}
	var sv stackVal
	py := u.pyReader()
	defer py.done()
	for _, k := range keys {
		if err := old.LookupAndDelete(&k, &v); err != nil {
			continue
		}
		s := Stack{PID: int(k.PID), TID: int(k.TID), Value: v.Value, Events: v.Events, OffCPU: k.Kind&0xff == kindOffCPU, End: EndKernelThread}
		if k.Stack != 0 {
			if err := u.objs.Stacks.Lookup(k.Stack, &sv); err == nil {
				n := min(int(sv.N), MaxFrames)
				s.User = append([]uint64(nil), sv.PCs[:n]...)
				s.FP, s.End, s.Gen = sv.FPMask, End(sv.End), int(sv.Gen)
				s.Interp = py.frames(s.PID, k.Stack)
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

func (u *Unwinder) countsMap(i uint32) *ebpf.Map {
	if i == 1 {
		return u.objs.Counts1
	}
	return u.objs.Counts0
}
