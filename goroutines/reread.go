package goroutines

import (
	"bytes"
	"sort"

	"github.com/rewindstack/rewind/internal/goruntime"
	"github.com/rewindstack/rewind/live"
)

// rereadPlan is how the read in a pause (readAgain) copies the gs that
// the read made just before it found, worked out before the pause so
// that the pause only copies and compares: the allgs pointers read then,
// the coalesced ranges of target memory that hold those gs, in batches
// read in turn into one faulted-in buffer, and where each slot's g lands
// in it.
//
// The runtime never removes a g from allgs and never moves one (allgs
// "contains all Gs ever created (including dead Gs), and thus never
// shrinks"; allgadd only appends, and gs are not freed), so in the pause
// the slots read before hold the same pointers; readAgain checks that
// they do.
type rereadPlan struct {
	ptrs    []byte      // allgs as read before the pause, 8 bytes a slot
	spans   []live.Read // the gs, coalesced, in address order
	slotOff []int       // where slot i's g is in buf, in its batch
	buf     []byte      // one batch's gs
	gsize   int
	ptrBuf  []byte  // room for allgs read in the pause
	keep    []int32 // room for the indexes of the goroutines kept
	order   []int32 // slots by address of their g
	batches []rereadBatch

	// win is the first winSize bytes of each slot's g as read before the
	// pause (see validityWindow); keepable the index in the goroutines
	// read then of each slot's goroutine if its copy may be kept (see
	// unchangedSince), else -1. nil when not recorded.
	win      []byte
	winSize  int
	keepable []int32
}

// validityWindow is how many bytes at the start of a g hold every field
// that says whether the goroutine has run since an earlier read: its
// stack bounds, M, saved registers (g.sched, g.syscallsp/pc), status, id,
// waitsince and waitreason (177 or 185 bytes from Go 1.22 to 1.27). A g
// whose window is unchanged, of a goroutine that cannot have run since
// (unchangedSince), is unchanged in every other field a dump reads: its
// creator (gopc, startpc, parentGoid) is set once when the goroutine is
// created, and only the goroutine itself sets its labels and lockedm
// (runtime/pprof.SetGoroutineLabels, LockOSThread).
func validityWindow(o *goruntime.GOffsets) int {
	w := o.WaitReason + 1
	for _, off := range []int{o.StackLo, o.StackHi, o.M, o.SchedSP, o.SchedPC, o.SchedBP,
		o.SyscallSP, o.SyscallPC, o.Status, o.Goid, o.WaitSince} {
		w = max(w, off+8)
	}
	return min(w, o.Size)
}

// rereadBatch is one batch of a rereadPlan: the ranges spans to
// spansEnd, which hold the gs of the slots order[slots:slotsEnd].
type rereadBatch struct {
	spans, spansEnd, slots, slotsEnd int
}

// batchBytes is how much of the gs readAgain reads at a time, into one
// buffer that stays in the CPU's caches while its gs are compared with
// the read before: for 100,000 gs (46 MB) that took the copy and the
// comparison from 15-16 to 13-14 ms of CPU time, against copying them all
// into one buffer and comparing after (256 KB did as well as 1 MB, within
// the noise of a loaded machine). A var for tests.
var batchBytes = 1 << 20

// planReread plans readAgain for the gs that pre (a read before the
// pause, with its bySlot index) found. It returns nil when there is
// nothing to plan or a pointer cannot be a g (0, or a g that would wrap
// the address space): readAll's own path then reads everything in the
// pause.
func planReread(pre *snapshot, gsize int) *rereadPlan {
	ptrs := pre.slotPtrs
	n := len(ptrs) / 8
	if n == 0 || gsize <= 0 {
		return nil
	}
	p := &rereadPlan{ptrs: ptrs, slotOff: make([]int, n), gsize: gsize}
	if pre.winSize > 0 && len(pre.win) == n*pre.winSize {
		// The goroutines whose copy may be kept, by slot.
		p.win, p.winSize = pre.win, pre.winSize
		p.keepable = make([]int32, n)
		for slot := range p.keepable {
			p.keepable[slot] = -1
			if slot < len(pre.bySlot) && pre.bySlot[slot] >= 0 && pre.gs[pre.bySlot[slot]].unchangedSince() {
				p.keepable[slot] = pre.bySlot[slot]
			}
		}
	}
	order := make([]int32, n)
	for i := range order {
		order[i] = int32(i)
		if a := u64(ptrs, 8*i); a == 0 || a+uint64(gsize) < a {
			return nil
		}
	}
	sort.Slice(order, func(a, b int) bool { return u64(ptrs, 8*int(order[a])) < u64(ptrs, 8*int(order[b])) })
	// Ranges as readGs makes them (gs less than gGap apart in one), in
	// batches of at most batchBytes read into one buffer in turn.
	type span struct {
		lo, hi uint64
		off    int // of lo in the batch's buffer
	}
	var spans []span
	used := 0
	cur := rereadBatch{}
	for k, i := range order {
		a := u64(ptrs, 8*int(i))
		end := a + uint64(gsize)
		if sp := len(spans) - 1; sp >= cur.spans && a <= spans[sp].hi+gGap && used+int(max(end, spans[sp].hi)-spans[sp].hi) <= batchBytes {
			if end > spans[sp].hi {
				used += int(end - spans[sp].hi)
				spans[sp].hi = end
			}
			p.slotOff[i] = spans[sp].off + int(a-spans[sp].lo)
			continue
		}
		if used+gsize > batchBytes && len(spans) > cur.spans {
			cur.spansEnd, cur.slotsEnd = len(spans), k
			p.batches = append(p.batches, cur)
			cur = rereadBatch{spans: len(spans), slots: k}
			used = 0
		}
		spans = append(spans, span{a, end, used})
		p.slotOff[i] = used
		used += gsize
	}
	cur.spansEnd, cur.slotsEnd = len(spans), len(order)
	p.batches = append(p.batches, cur)
	p.order = order
	p.buf = make([]byte, max(batchBytes, gsize))
	faultIn(p.buf)
	p.spans = make([]live.Read, len(spans))
	for i, sp := range spans {
		p.spans[i] = live.Read{Addr: sp.lo, Buf: p.buf[sp.off : sp.off+int(sp.hi-sp.lo) : sp.off+int(sp.hi-sp.lo)]}
	}
	p.ptrBuf = make([]byte, len(ptrs)+len(ptrs)/8+8<<10)
	faultIn(p.ptrBuf)
	p.keep = make([]int32, n)
	for i := 0; i < n; i += 1024 {
		p.keep[i] = 0 // faulted in now, not in the pause
	}
	p.keep = p.keep[:0]
	return p
}

// readAgain is readAll in the pause that follows prev, a read made while
// the process ran and readied by prepareReuse. It reads allgs and the gs
// prev found with the planned ranges, and keeps prev's copy of each
// goroutine whose g is unchanged in every field read and that cannot have
// run since (see unchangedSince): its stack and labels too. Only the
// other goroutines, and the gs of slots added since, are decoded and have
// their stacks and labels copied in the pause. The kept goroutines join
// the others in merge, after the pause.
//
// It returns nil when allgs no longer starts with the pointers prev read,
// or a planned range cannot be read: readAll then reads everything.
func readAgain(rd batchReader, lay *goruntime.Layout, bias uint64, prev *snapshot) *snapshot {
	p := prev.again
	if p.gsize != lay.G.Size {
		return nil
	}
	var hdr [16]byte
	hr := [1]live.Read{{Addr: lay.AllGs + bias, Buf: hdr[:]}}
	rd.ReadBatch(hr[:])
	if hr[0].N != len(hdr) {
		return nil
	}
	ptr, n := u64(hdr[:], 0), u64(hdr[:], 8)
	m := len(p.ptrs) / 8
	if n < uint64(m) || n > maxGoroutes {
		return nil
	}
	ptrs := reuse(p.ptrBuf, 8*int(n))
	pr := [1]live.Read{{Addr: ptr, Buf: ptrs}}
	rd.ReadBatch(pr[:])
	if pr[0].N != len(ptrs) || !bytes.Equal(ptrs[:8*m], p.ptrs) {
		return nil
	}
	s := &snapshot{gs: prev.spareGs[:0], arena: prev.spareArena, reads: prev.reads[:0], gbuf: prev.gbuf,
		keep: p.keep[:0], prevGs: prev.gs}
	s.co.Reuse(&prev.co)
	o := &lay.G
	w := p.winSize
	for _, bt := range p.batches {
		spans := p.spans[bt.spans:bt.spansEnd]
		rd.ReadBatch(spans)
		for i := range spans {
			if spans[i].N != len(spans[i].Buf) {
				return nil
			}
		}
		for _, slot := range p.order[bt.slots:bt.slotsEnd] {
			s.compare(int(slot), p, prev, w, o)
		}
	}
	// Goroutines in slots added since the read before.
	if int(n) > m {
		k := int(n) - m
		reads := make([]live.Read, k)
		for i := range reads {
			reads[i] = live.Read{Addr: u64(ptrs, 8*(m+i))}
		}
		s.readGs(rd, reads, p.gsize)
		s.parseGs(reads, lay, m)
	}
	s.co.R, s.co.Gap = rd, stackGap
	s.copyStacksAndMs(&s.co, lay, nil)
	s.co.R = nil
	s.readLabelsOf(rd, lay)
	s.kept = len(s.keep)
	return s
}

// gFields are the fields of a g that a read decodes (raw's first part).
type gFields struct {
	addr                 uint64
	goid, parent         int64
	status               uint32
	scan                 bool
	waitReason           uint8
	waitSince            int64
	stackLo, stackHi     uint64
	sp, pc, bp           uint64
	syscallSP, syscallPC uint64
	m, lockedM           uint64
	gopc, startpc        uint64
	labelsPtr            uint64
}

// unchangedSince says whether the goroutine, as read before the pause,
// cannot have run between that read and a read in the pause that found
// its g unchanged, so that the stack and labels copied then are still its
// own: it was waiting with a nonzero g.waitsince, which the runtime zeroes
// whenever it runs the goroutine (execute, exitsyscall) and the garbage
// collector sets, on blocked goroutines whose waitsince is zero, to a
// value no later cycle repeats (see parkedSince). g.labels changes only
// from the goroutine itself (runtime/pprof.SetGoroutineLabels), and a
// label set is never changed once set, so its copy is still right too.
func (g *raw) unchangedSince() bool {
	return g.status == gWaiting && g.waitSince != 0 && !g.scan && !g.stackCut &&
		g.stack.Addr == g.sp && uint64(len(g.stack.Data)) == min(g.stackHi-g.sp, maxStackCopy)
}

// merge adds, after a pause, the goroutines readAgain kept from the read
// before it.
func (s *snapshot) merge() {
	if s.prevGs == nil {
		return
	}
	gs := make([]raw, 0, len(s.gs)+len(s.keep))
	gs = append(gs, s.gs...)
	for _, i := range s.keep {
		gs = append(gs, s.prevGs[i])
	}
	s.gs, s.keep, s.prevGs = gs, nil, nil
}

// compare keeps the goroutine of slot, as read in the pause into p.buf,
// from prev, the read before the pause, if it is unchanged and cannot
// have run since; otherwise it decodes it.
func (s *snapshot) compare(slot int, p *rereadPlan, prev *snapshot, w int, o *goruntime.GOffsets) {
	off := p.slotOff[slot]
	b := p.buf[off : off+p.gsize : off+p.gsize]
	k := int32(-1)
	if p.keepable != nil {
		// Most goroutines of a program are parked and stay so: one
		// comparison of a few cache lines keeps them.
		if k = p.keepable[slot]; k >= 0 && bytes.Equal(b[:w], p.win[slot*w:slot*w+w]) {
			s.keep = append(s.keep, k)
			return
		}
	} else if slot < len(prev.bySlot) && prev.bySlot[slot] >= 0 && prev.gs[prev.bySlot[slot]].unchangedSince() {
		k = prev.bySlot[slot]
	}
	g := decodeG(b, o, u64(p.ptrs, 8*slot), slot)
	if g.status == gDead || g.status == gIdle || g.status == gDeadExtra {
		return
	}
	if k >= 0 && prev.gs[k].gFields == g.gFields {
		// A field in the window that no field read depends on changed
		// (g.schedlink, g.param, ...).
		s.keep = append(s.keep, k)
		return
	}
	s.addG(&g)
}
