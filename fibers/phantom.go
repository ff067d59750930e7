package fibers

import (
	"sort"

	"github.com/rewindstack/rewind/stacks"
	"github.com/rewindstack/rewind/unwind"
)

// maxLiveStack bounds the live part of one walk's stack: frames whose
// stack pointers climb further above the first frame's are not trusted
// to mark a stack in use.
const maxLiveStack = 64 << 20

// DropPhantoms removes, from walks (stacks.Walk's, fibers included), the
// fibers of contexts a scan found (scanned) that are stale: whose resumed
// stack pointer lies in the live part of another walk's stack, from that
// walk's first stack pointer up to its outermost frame's.
//
// Such a context is a record a fiber saved earlier and left where its
// frames still are: a ucontext_t local to a function of fiber A that
// swapped to a generator through it and was resumed through another
// record (the local keeps A's registers of then, the SP of that function's
// frame), or the fcontext record jump_fcontext pushed on A's stack, whose
// pointer the generator keeps after it jumped back (A's next call writes
// its return address into the record's PC slot, so it still looks
// saved). A then parked deeper: both look parked, and the stale one
// resumes into a frame A's walk passes through. The clustering in Scan
// folds them only when they are closer than minFiberGap.
//
// A thread's walk, or a fiber's the scan did not find (explicit, a
// runtime's), covers its stack whatever its end; a scanned fiber's only
// once it is kept and when its walk ended cleanly (outermost, or at an
// undefined return address), so that garbage frames never hide a real
// fiber. Scanned fibers are taken from the lowest stack pointer up, so of
// two on one stack the deeper is kept, as in the clustering: a stale
// record below a real fiber's stack pointer (in its dead part) would be
// kept instead of it, which no rule on stack pointers alone can tell.
func DropPhantoms(walks []stacks.Walked, scanned []Spec) []stacks.Walked {
	if len(scanned) == 0 {
		return walks
	}
	isScanned := map[Spec]bool{}
	for _, sp := range scanned {
		isScanned[sp] = true
	}
	type span struct{ lo, hi uint64 }
	var covers []span
	var cands []int // indexes of scanned fibers' walks
	for i := range walks {
		w := &walks[i]
		if w.Fiber != nil && isScanned[Spec{Kind: w.Fiber.Runtime, Addr: w.Fiber.Saved}] {
			if w.Fiber.Err == nil && len(w.Stack.Frames) > 0 {
				cands = append(cands, i)
			}
			continue
		}
		if lo, hi, ok := liveSpan(&w.Stack); ok {
			covers = append(covers, span{lo, hi})
		}
	}
	sp := func(i int) uint64 { return walks[i].Stack.Frames[0].SP }
	sort.SliceStable(cands, func(a, b int) bool { return sp(cands[a]) < sp(cands[b]) })
	sort.Slice(covers, func(a, b int) bool { return covers[a].lo < covers[b].lo })
	// Candidates go up by stack pointer, and so do the spans they add:
	// a candidate is covered when the highest end of the spans that
	// start at or below it reaches it.
	drop := map[int]bool{}
	var reach uint64
	j := 0
	for _, i := range cands {
		s := sp(i)
		for ; j < len(covers) && covers[j].lo <= s; j++ {
			reach = max(reach, covers[j].hi)
		}
		if s <= reach {
			drop[i] = true
			continue
		}
		st := &walks[i].Stack
		if st.End != unwind.EndOutermost && st.End != unwind.EndRAUndefined {
			continue
		}
		if _, hi, ok := liveSpan(st); ok {
			reach = max(reach, hi)
		}
	}
	if len(drop) == 0 {
		return walks
	}
	out := walks[:0:0]
	for i := range walks {
		if !drop[i] {
			out = append(out, walks[i])
		}
	}
	return out
}

// liveSpan is the live part of a walk's stack: from its first frame's
// stack pointer to the highest its frames reach while they climb, within
// maxLiveStack.
func liveSpan(st *unwind.Stack) (lo, hi uint64, ok bool) {
	if len(st.Frames) == 0 || st.Frames[0].SP == 0 {
		return 0, 0, false
	}
	lo = st.Frames[0].SP
	hi = lo
	for _, f := range st.Frames[1:] {
		if f.SP < hi || f.SP-lo > maxLiveStack {
			break
		}
		hi = f.SP
	}
	return lo, hi, true
}
