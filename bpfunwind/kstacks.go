package bpfunwind

import "github.com/cilium/ebpf"

// Kernel stacks are kept in two maps, one per count map: a count's
// kernel stack is in the map of the period it was taken in (the kstacks1
// bit of its kind). Once Read has read a period's counts, nothing new
// refers to that period's kernel-stack map until the next switch back,
// but blocked intervals that began in it and are still open: pruneKStacks
// empties the map but for their stacks, so that the map never fills with
// stacks of periods gone by.

const (
	genStale   = 0x80000000 // stack.gen: walked after the description was dropped (GEN_STALE)
	kindOffCPU = 1          // count_key.kind: an off-CPU interval
	kstacks1   = 0x100      // count_key.kind: the kernel stack is in kstacks1
)

// kstackRef names a kernel stack: its map and its id there.
type kstackRef struct {
	one bool // in kstacks1
	id  int32
}

func (u *Unwinder) kstackMap(one bool) *ebpf.Map {
	if one {
		return u.objs.Kstacks1
	}
	return u.objs.Kstacks0
}

// pruneKStacks deletes the kernel stacks of the map the period just read
// used (one: kstacks1), but those of blocked intervals still open, and
// returns how many it kept and deleted.
func (u *Unwinder) pruneKStacks(one bool) (kept, deleted int) {
	keep := map[int32]bool{}
	var tid uint32
	var os struct {
		TS  uint64
		Key countKey
	}
	it := u.objs.Offcpu.Iterate()
	for it.Next(&tid, &os) {
		if (os.Key.Kind&kstacks1 != 0) == one && os.Key.KStack >= 0 {
			keep[os.Key.KStack] = true
		}
	}
	m := u.kstackMap(one)
	var ids []uint32
	var id uint32
	// A stack-trace map's keys are iterated without their values.
	for {
		var next uint32
		var err error
		if len(ids) == 0 {
			err = m.NextKey(nil, &next)
		} else {
			err = m.NextKey(id, &next)
		}
		if err != nil {
			break
		}
		id = next
		ids = append(ids, next)
		if len(ids) > MaxKStacks {
			break
		}
	}
	for _, id := range ids {
		if keep[int32(id)] {
			kept++
		} else if m.Delete(id) == nil {
			deleted++
		}
	}
	return kept, deleted
}
