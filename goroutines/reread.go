package goroutines

import (
	"bytes"
	"hash/maphash"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"

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
	ptrs    []byte // allgs as read before the pause, 8 bytes a slot
	slotOff []int  // where slot i's g is in a worker's buf, in its batch
	workers []rereadWorker
	gsize   int
	ptrBuf  []byte  // room for allgs read in the pause
	order   []int32 // slots by address of their g
	batches []rereadBatch

	// win is the first winSize bytes of each slot's g as read before the
	// pause (see validityWindow), rest the hash of the rest of the gs of
	// the goroutines no collection had seen parked then (see snapshot);
	// keepable the index in the goroutines read then of each slot's
	// goroutine if its copy may be kept (see unchangedSince and
	// parkedCopied), else -1. nil when not recorded.
	win      []byte
	winSize  int
	rest     []uint64
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

// rereadWorker is one of the goroutines that read and compare the batches
// of a rereadPlan in the pause, in parallel: the target is stopped, so its
// CPUs are free, and one core copies 100,000 gs (46 MB) in 14-17 ms.
type rereadWorker struct {
	buf   []byte      // one batch's gs
	spans []live.Read // the gs, coalesced, in address order, read into buf
	keep  []int32     // room for the indexes of the goroutines kept
}

// rereadWorkers is how many goroutines read the gs in a pause at most.
const rereadWorkers = 4

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
	if pre.winSize > 0 && len(pre.win) == n*pre.winSize && len(pre.rest) == n {
		// The goroutines whose copy may be kept, by slot.
		p.win, p.winSize, p.rest = pre.win, pre.winSize, pre.rest
		p.keepable = make([]int32, n)
		for slot := range p.keepable {
			p.keepable[slot] = -1
			if slot >= len(pre.bySlot) || pre.bySlot[slot] < 0 {
				continue
			}
			if g := &pre.gs[pre.bySlot[slot]]; g.unchangedSince() || (g.parkedCopied() && p.rest[slot] != 0) {
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
	p.workers = make([]rereadWorker, min(len(p.batches), runtime.GOMAXPROCS(0), rereadWorkers))
	for w := range p.workers {
		wk := &p.workers[w]
		wk.buf = make([]byte, max(batchBytes, gsize))
		faultIn(wk.buf)
		wk.spans = make([]live.Read, len(spans))
		for i, sp := range spans {
			wk.spans[i] = live.Read{Addr: sp.lo, Buf: wk.buf[sp.off : sp.off+int(sp.hi-sp.lo) : sp.off+int(sp.hi-sp.lo)]}
		}
		wk.keep = make([]int32, n)
		for i := 0; i < n; i += 1024 {
			wk.keep[i] = 0 // faulted in now, not in the pause
		}
		wk.keep = wk.keep[:0]
	}
	p.ptrBuf = make([]byte, len(ptrs)+len(ptrs)/8+8<<10)
	faultIn(p.ptrBuf)
	return p
}

// readAgain is readAll in the pause that follows prev, a read made while
// the process ran and readied by prepareReuse. It reads allgs and the gs
// prev found with the planned ranges, and keeps prev's copy of each
// goroutine whose g is unchanged in every field read and that cannot have
// run since (see unchangedSince, and parkedCopied for goroutines no
// collection has seen): its stack and labels too. Only the
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
	lap(rd, stepList)
	s := &snapshot{gs: prev.spareGs[:0], arena: prev.spareArena, reads: prev.reads[:0], gbuf: prev.gbuf,
		keep: p.workers[0].keep[:0], prevGs: prev.gs}
	s.co.Reuse(&prev.co)
	// The batches go to the workers in turn; each keeps and decodes into
	// a snapshot of its own, joined to s after.
	parts := make([]*snapshot, len(p.workers))
	parts[0] = s
	for i := 1; i < len(parts); i++ {
		parts[i] = &snapshot{keep: p.workers[i].keep[:0]}
	}
	// The first worker is this goroutine: a program's gs mostly fit one
	// batch, and handing that to another goroutine made this thread (the
	// capture's tracer, locked to it) give up its P and wait, in the
	// pause, for another thread to be scheduled to run it, then to be
	// woken itself.
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	for i := 1; i < len(p.workers); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !parts[i].compareBatches(rd, p, &p.workers[i], &next, prev, &lay.G) {
				failed.Store(true)
			}
		}()
	}
	if !s.compareBatches(rd, p, &p.workers[0], &next, prev, &lay.G) {
		failed.Store(true)
	}
	wg.Wait()
	if failed.Load() {
		return nil
	}
	for _, part := range parts[1:] {
		s.keep = append(s.keep, part.keep...)
		s.gs = append(s.gs, part.gs...)
		s.notes = append(s.notes, part.notes...)
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
	lap(rd, stepGs)
	s.co.R, s.co.Gap = rd, stackGap
	s.copyStacksAndMs(&s.co, lay, nil)
	s.co.R = nil
	lap(rd, stepStacks)
	s.readLabelsOf(rd, lay)
	lap(rd, stepLabels)
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
	return g.parkedCopied() && g.waitSince != 0
}

// parkedCopied says whether the goroutine was waiting, not being scanned,
// with its stack copied whole from its saved sp: a copy that may be kept
// if nothing says it has run since.
func (g *raw) parkedCopied() bool {
	return g.status == gWaiting && !g.scan && !g.stackCut &&
		g.stack.Addr == g.sp && uint64(len(g.stack.Data)) == min(g.stackHi-g.sp, maxStackCopy)
}

// A goroutine that parked after the last collection (waitsince 0, most of
// the goroutines of a program that started them since) has no mark that
// proves it has not run. Its copy is kept (compare) when its whole g is
// unchanged: every run ends in a transition out of
// running that adds one to g.trackingSeq (Go 1.17 and later; an 8-bit
// counter of the scheduling-latency sampling), and parking again rewrites
// g.sched, g.waiting, g.param, g.waitreason and, for a sleep, the wake-up
// time (g.sleepWhen, g.timer). The one run left unseen is a goroutine that
// ran a multiple of 256 times between the two reads and parked again at
// the same sp and pc with every other field as before: its stack is then
// the copy taken before the pause, at most that read's duration earlier,
// of a goroutine parked at the same place.
//
// The rest of such a g, past the window, is compared by a 64-bit hash
// (restHash): keeping whole copies of 100,000 gs (46 MB) made the pause's
// comparisons stream them from memory.

// restSeed seeds restHash, for this process's lifetime.
var restSeed = maphash.MakeSeed()

// restHash hashes the part of a g past its validity window, never 0 (0
// marks a slot whose goroutine needs no hash).
func restHash(b []byte) uint64 {
	return maphash.Bytes(restSeed, b) | 1
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
		gs[len(gs)-1].kept = true
	}
	s.gs, s.keep, s.prevGs = gs, nil, nil
}

// compareBatches reads and compares, with wk's buffer, the batches of p
// that next hands out, until none is left. It returns false when a
// planned range could not be read whole.
func (s *snapshot) compareBatches(rd batchReader, p *rereadPlan, wk *rereadWorker, next *atomic.Int64, prev *snapshot, o *goruntime.GOffsets) bool {
	for {
		i := int(next.Add(1) - 1)
		if i >= len(p.batches) {
			return true
		}
		bt := p.batches[i]
		spans := wk.spans[bt.spans:bt.spansEnd]
		rd.ReadBatch(spans)
		for i := range spans {
			if spans[i].N != len(spans[i].Buf) {
				return false
			}
		}
		for _, slot := range p.order[bt.slots:bt.slotsEnd] {
			s.compare(int(slot), p, wk.buf, prev, o)
		}
	}
}

// compare keeps the goroutine of slot, as read in the pause into buf,
// from prev, the read before the pause, if it is unchanged and cannot
// have run since; otherwise it decodes it.
func (s *snapshot) compare(slot int, p *rereadPlan, buf []byte, prev *snapshot, o *goruntime.GOffsets) {
	w := p.winSize
	off := p.slotOff[slot]
	b := buf[off : off+p.gsize : off+p.gsize]
	k := int32(-1)
	if p.keepable != nil {
		// Most goroutines of a program are parked and stay so: one
		// comparison of a few cache lines keeps them.
		if k = p.keepable[slot]; k >= 0 {
			same := bytes.Equal(b[:w], p.win[slot*w:slot*w+w])
			if h := p.rest[slot]; h != 0 {
				// Not seen by a collection: kept only if the whole
				// g is unchanged.
				if same && restHash(b[w:]) == h {
					s.keep = append(s.keep, k)
					return
				}
				k = -1 // it may have run
			} else if same {
				s.keep = append(s.keep, k)
				return
			}
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
