package fibers

import (
	"encoding/binary"
	"slices"
	"sort"
	"strings"

	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// maxLiveStack bounds the live part of one walk's stack: frames whose
// stack pointers climb further above the first frame's are not trusted
// to mark a stack in use.
const maxLiveStack = 64 << 20

// Walk is one context's walk as Phantoms reads it: Fiber is the fiber's
// context (nil for a thread's), Stack its walk (empty when Fiber.Err is
// set): a stacks.Walked's Fiber and &Stack. Phantoms takes these rather
// than stacks' type so that fibers, a runtime's reader, stays below the
// outputs.
type Walk struct {
	Fiber *target.Context
	Stack *unwind.Stack
}

// Phantoms tells, of walks (every thread's and fiber's of a target), the
// fibers of contexts a scan found (scanned) that are stale: the result's
// [i] is set for such a walks[i]; it is nil when there is none. No rule looks
// at mappings: one mapping may hold many stacks (adjacent mmaps merge),
// among them one a thread is running on, so only the walks tell which
// stack a record belongs to and which part of it is in use. The live part
// of a walk's stack runs from its first stack pointer up to the highest
// its frames reach while they climb; a walk is clean when it ended at its
// outermost frame or at an undefined return address, as a parked stack's
// does.
//
//  1. In a running stack. A scanned context is dropped when a frame of
//     its walk lies in the live part of a thread's stack or of a fiber's
//     the scan did not find (explicit, a runtime's): resumed, it would run
//     in frames that are in use. Its first frame there is a record left
//     in such a frame (main's own ucontext_t, saved where main still is,
//     or a glibc jmp_buf in start_thread's frame); a later one, a record
//     left below the running stack pointer (a switch made from frames
//     that have since returned), whose chain climbs back into the running
//     frames. A walk that is not clean is dropped too within minFiberGap
//     under such a live part: a record below the running stack pointer
//     whose frames the running code has since overwritten.
//  2. Through another switch. A scanned context is dropped when a frame
//     of its walk other than the first has the stack pointer and the PC
//     of the first frame of another scanned ucontext, jmpbuf or fcontext
//     context: that frame returns to just after the call that switched
//     away, so every frame below it is older than that switch. (The scan
//     takes an fcontext record only when its return address follows a
//     call that reaches jump_fcontext, and a ucontext_t's saved PC is
//     that frame's only while the word below its stack pointer still
//     holds it, so a record whose slot a later call rewrote never counts
//     here.)
//  3. Older frames. Of two scanned walks that share a frame (its stack
//     pointer and PC: one stack), the deeper is dropped when the call
//     before that frame's return address calls the function of the
//     shallower walk's frame below it and not that of the deeper walk's
//     (see dropOlder): a record a fiber left deeper when it parked there
//     earlier, through another record, whose frames are whole.
//  4. In a parked stack. Taken from the lowest stack pointer up, a clean
//     scanned walk is dropped when its stack pointer lies in the live part
//     of a kept clean one's stack, or within minFiberGap above a kept
//     one's stack pointer: a ucontext_t local to a function of fiber A
//     that swapped to a generator through it and was resumed through
//     another record (it keeps the SP of that function's frame), or the
//     fcontext record jump_fcontext pushed on A's stack, whose pointer the
//     generator keeps. Then a walk that is not clean is dropped within
//     minFiberGap under a kept clean one's stack pointer, in its live
//     part, or within minFiberGap above another kept one's: a record left
//     deeper whose frames were since overwritten (the garbage frames of a
//     stale record never hide a real fiber: they cover nothing). Of two
//     clean ones on one stack that nothing above tells apart, the deeper
//     is kept.
func Phantoms(walks []Walk, scanned []Spec) []bool {
	if len(scanned) == 0 {
		return nil
	}
	isScanned := map[Spec]bool{}
	for _, sp := range scanned {
		isScanned[sp] = true
	}
	var running spans
	var cands []int // indexes of scanned fibers' walks
	for i := range walks {
		w := &walks[i]
		if w.Fiber != nil && isScanned[Spec{Kind: w.Fiber.Runtime, Addr: w.Fiber.Saved}] {
			if w.Fiber.Err == nil && len(w.Stack.Frames) > 0 {
				cands = append(cands, i)
			}
			continue
		}
		if lo, hi, ok := liveSpan(w.Stack); ok {
			running.add(lo, hi)
		}
	}
	running.index()
	drop := map[int]bool{}
	// 1: in a running stack.
	for _, i := range cands {
		st := walks[i].Stack
		if !clean(st) && running.near(st.Frames[0].SP, minFiberGap) {
			drop[i] = true
			continue
		}
		for _, f := range climbing(st) {
			if running.near(f.SP, 0) {
				drop[i] = true
				break
			}
		}
	}
	// 2: through another switch.
	type frameKey struct{ sp, pc uint64 }
	heads := map[frameKey]bool{}
	for _, i := range cands {
		switch walks[i].Fiber.Runtime {
		case UContext, JmpBuf, FContext:
			f := walks[i].Stack.Frames[0]
			heads[frameKey{f.SP, f.PC}] = true
		}
	}
	for _, i := range cands {
		if drop[i] {
			continue
		}
		fs := climbing(walks[i].Stack)
		for _, f := range fs[min(1, len(fs)):] {
			if heads[frameKey{f.SP, f.PC}] {
				drop[i] = true
				break
			}
		}
	}
	// 3: a deeper one whose frames are not those called last.
	dropOlder(walks, cands, drop)
	// 4: in a parked stack, the clean walks first.
	sp := func(i int) uint64 { return walks[i].Stack.Frames[0].SP }
	sort.SliceStable(cands, func(a, b int) bool { return sp(cands[a]) < sp(cands[b]) })
	var kept spans
	var reach uint64
	for _, i := range cands {
		st := walks[i].Stack
		if drop[i] || !clean(st) {
			continue
		}
		// Candidates go up by stack pointer, and so do the spans they
		// add: a candidate is covered when the highest end of the spans
		// that start at or below it reaches it.
		s := sp(i)
		if s <= reach {
			drop[i] = true
			continue
		}
		_, hi, _ := liveSpan(st)
		hi = max(hi, s+minFiberGap-1)
		reach = max(reach, hi)
		kept.add(s, hi)
	}
	kept.index()
	var bad [][2]uint64 // the spans of the kept walks that ended badly
	for _, i := range cands {
		if drop[i] || clean(walks[i].Stack) {
			continue
		}
		s := sp(i)
		if kept.near(s, minFiberGap) || slices.ContainsFunc(bad, func(b [2]uint64) bool { return b[0] <= s && s <= b[1] }) {
			drop[i] = true
			continue
		}
		bad = append(bad, [2]uint64{s, s + minFiberGap - 1})
	}
	if len(drop) == 0 {
		return nil
	}
	out := make([]bool, len(walks))
	for i := range drop {
		out[i] = true
	}
	return out
}

// spans are live parts of stacks ([lo, hi]: the running stacks', the
// kept fibers'), sorted by their lower end once indexed, with the highest
// upper end up to each.
type spans struct {
	lo, hi, reach []uint64
}

func (s *spans) add(lo, hi uint64) {
	s.lo = append(s.lo, lo)
	s.hi = append(s.hi, hi)
}

func (s *spans) index() {
	idx := make([]int, len(s.lo))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return s.lo[idx[a]] < s.lo[idx[b]] })
	lo, hi := make([]uint64, len(idx)), make([]uint64, len(idx))
	s.reach = make([]uint64, len(idx))
	for k, i := range idx {
		lo[k], hi[k] = s.lo[i], s.hi[i]
		s.reach[k] = hi[k]
		if k > 0 {
			s.reach[k] = max(s.reach[k], s.reach[k-1])
		}
	}
	s.lo, s.hi = lo, hi
}

// near reports whether sp lies in one of the spans, or less than below
// under one.
func (s *spans) near(sp, below uint64) bool {
	k := sort.Search(len(s.lo), func(k int) bool { return s.lo[k] > sp+below }) - 1
	return k >= 0 && s.reach[k] >= sp
}

// clean reports whether a walk ended as a parked stack's does: at its
// outermost frame, or at an undefined return address.
func clean(st *unwind.Stack) bool {
	return st.End == unwind.EndOutermost || st.End == unwind.EndRAUndefined
}

// climbing is the part of a walk whose frames make its live span: from
// the first frame while the stack pointers climb, within maxLiveStack.
func climbing(st *unwind.Stack) []unwind.Frame {
	fs := st.Frames
	if len(fs) == 0 || fs[0].SP == 0 {
		return nil
	}
	lo, hi := fs[0].SP, fs[0].SP
	n := 1
	for _, f := range fs[1:] {
		if f.SP < hi || f.SP-lo > maxLiveStack {
			break
		}
		hi = f.SP
		n++
	}
	return fs[:n]
}

// liveSpan is the live part of a walk's stack: from its first frame's
// stack pointer to the highest its frames reach while they climb, within
// maxLiveStack.
func liveSpan(st *unwind.Stack) (lo, hi uint64, ok bool) {
	fs := climbing(st)
	if len(fs) == 0 {
		return 0, 0, false
	}
	return fs[0].SP, fs[len(fs)-1].SP, true
}

// dropOlder is rule 3 of Phantoms: of two scanned walks (not dropped
// yet) that share a frame (its stack pointer and PC: one stack), the
// deeper is dropped when, at the first frame they share, the call before
// its return address calls the function of the shallower walk's frame
// below it and not that of the deeper walk's: the return address is that
// of the call made last from that frame, so the deeper walk's frames
// below it are older. Anything else (a call it cannot decode, no
// symbols, both or neither matching: a tail call leaves its caller's
// return address to a frame of another function) leaves the pair to rule
// 4, which keeps the deeper.
func dropOlder(walks []Walk, cands []int, drop map[int]bool) {
	type at struct{ cand, k int }
	type frameKey struct{ sp, pc uint64 }
	shared := map[frameKey][]at{}
	for _, i := range cands {
		if drop[i] {
			continue
		}
		fs := climbing(walks[i].Stack)
		for k := 1; k < len(fs); k++ {
			key := frameKey{fs[k].SP, fs[k].PC}
			shared[key] = append(shared[key], at{i, k})
		}
	}
	for _, list := range shared {
		if len(list) < 2 {
			continue
		}
		for _, a := range list {
			for _, b := range list {
				fa, fb := walks[a.cand].Stack.Frames, walks[b.cand].Stack.Frames
				if a.cand == b.cand || drop[a.cand] || drop[b.cand] || fa[0].SP >= fb[0].SP {
					continue
				}
				// a is the deeper; the frames below the shared one
				// must differ for it to be the first they share.
				ca, cb := &fa[a.k-1], &fb[b.k-1]
				if ca.SP == cb.SP && ca.PC == cb.PC {
					continue
				}
				m := &fa[a.k]
				if callsFrame(m, cb) == 1 && callsFrame(m, ca) == 0 {
					drop[a.cand] = true
				}
			}
		}
	}
}

// callsFrame reports whether the call before frame m's return address (a
// call rel32, to a function of m's object or to a PLT entry of it) calls
// the function holding frame c's PC: 1 it does, 0 it calls another, -1
// it cannot tell.
func callsFrame(m, c *unwind.Frame) int {
	if m.Exact || m.Map == nil || m.Map.Module == nil || m.Map.Module.File == nil ||
		c.Map == nil || c.Map.Module == nil || c.Map.Module.File == nil {
		return -1
	}
	f := m.Map.Module.File
	ra := m.PC - m.Map.Bias
	var b [5]byte
	if f.ReadVaddr(ra-5, b[:]) != nil || b[0] != 0xe8 {
		return -1
	}
	t := ra + uint64(int64(int32(binary.LittleEndian.Uint32(b[1:]))))
	pc := c.LookupPC() - c.Map.Bias
	name, off, ok := c.Map.Module.File.Symbolize(pc)
	if !ok {
		return -1
	}
	if plt, ok := f.PLTName(t); ok {
		plt = strings.TrimSuffix(plt, "@plt")
		if base, _, _ := strings.Cut(name, "@"); base == plt {
			return 1
		}
		return 0
	}
	if c.Map.Module != m.Map.Module {
		return -1
	}
	if pc-off == t {
		return 1
	}
	if _, _, ok := f.Symbolize(t); !ok {
		return -1 // not a function it knows: a local label, no symbol
	}
	return 0
}
