package goroutines

import (
	"encoding/binary"
	"fmt"
	"sort"
	"unsafe"

	"github.com/rewindstack/rewind/internal/goruntime"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/target"
)

// Goroutine states (runtime2.go), without the _Gscan bit.
const (
	gIdle       = 0
	gRunnable   = 1
	gRunning    = 2
	gSyscall    = 3
	gWaiting    = 4
	gDead       = 6
	gCopystack  = 8
	gLeaked     = 10
	gPreempted  = 9
	gDeadExtra  = 11
	gScan       = 0x1000
	maxStatus   = 11
	maxGoroutes = 4 << 20 // more than programs run in practice
	// gChunk goroutines' g structs are read (and kept) at a time.
	gChunk = 1 << 16
	// maxStackTotal bounds the stack bytes copied in all.
	maxStackTotal = 1 << 30
	// maxStackCopy bounds the used stack copied per goroutine; deeper
	// stacks are cut (with a note).
	maxStackCopy = 1 << 20
	maxLabels    = 1 << 10
	maxLabelLen  = 1 << 16
)

var statusNames = [...]string{gIdle: "idle", gRunnable: "runnable", gRunning: "running", gSyscall: "syscall",
	gWaiting: "waiting", gDead: "dead", gCopystack: "copystack", gLeaked: "leaked", gPreempted: "preempted",
	gDeadExtra: "waiting for cgo callback"}

// batchReader reads many ranges of target memory at once: live.Reader's
// process_vm_readv batches during a capture's pause, or a core's memory.
type batchReader interface {
	ReadBatch(reads []live.Read)
}

// memBatch adapts a target.Memory (a core file) to batchReader.
type memBatch struct{ mem target.Memory }

func (m memBatch) ReadBatch(reads []live.Read) {
	for i := range reads {
		r := &reads[i]
		r.N = 0
		if m.mem.ReadMemory(r.Addr, r.Buf) == nil {
			r.N = len(r.Buf)
			continue
		}
		// Whatever comes before an unreadable page.
		for n := len(r.Buf) / 2; n >= 8; n /= 2 {
			if m.mem.ReadMemory(r.Addr, r.Buf[:n]) == nil {
				r.N = n
				break
			}
		}
	}
}

// raw is one goroutine as copied: its g's fields and its stack.
type raw struct {
	gFields
	stack    target.Region // [sp or syscallsp, ...) as copied
	labels   map[string]string
	tid      int // the M's thread, for running and syscall
	stackCut bool
	kept     bool  // its stack and labels are the read before the pause's
	slot     int32 // index in runtime.allgs when read
}

// snapshot is what one read of the runtime's goroutines found.
type snapshot struct {
	gs    []raw
	notes []string

	// Buffers, kept so that a read during a pause can reuse those of a
	// read just before it: memory already faulted in, of the right size.
	gbuf, ptrs, arena []byte
	reads             []live.Read
	co                live.Coalescing
	// slotPtrs is runtime.allgs as read: a g pointer per slot.
	slotPtrs []byte
	// win holds, when winSize is set (preRead), the first winSize bytes
	// of each slot's g as read (zeros where unreadable); rest, for each
	// slot, the hash of the rest of its g (restHash) if its goroutine was
	// parked before any collection saw it (waitsince 0), else 0.
	win     []byte
	winSize int
	rest    []uint64

	// Set on a read made before a pause (see prepareReuse): bySlot maps
	// an allgs index to its goroutine in gs (-1: none); spareGs and
	// spareArena are faulted-in room for the read in the pause, which
	// leaves gs and arena as they are.
	bySlot     []int32
	spareGs    []raw
	spareArena []byte
	// again is the plan of the read in the pause (see readAgain).
	again *rereadPlan
	// kept counts the stacks taken from the read before the pause.
	kept int

	// Set on a read in a pause that kept goroutines of the read before
	// it unchanged (readAgain): gs holds only the others until merge adds
	// prevGs[keep[i]] for each i, after the pause.
	keep   []int32
	prevGs []raw
}

// prepareReuse readies a read made while the process ran for the read in
// the pause that follows: an index from allgs slots to goroutines,
// faulted-in buffers for the goroutines and for the stacks that changed,
// and the plan of readAgain.
func (s *snapshot) prepareReuse(gsize int) {
	slots := 0
	for i := range s.gs {
		slots = max(slots, int(s.gs[i].slot)+1)
	}
	s.bySlot = make([]int32, slots)
	for i := range s.bySlot {
		s.bySlot[i] = -1
	}
	for i := range s.gs {
		s.bySlot[s.gs[i].slot] = int32(i)
	}
	s.spareGs = make([]raw, len(s.gs)/8+64)
	for i := 0; i < len(s.spareGs); i += max(1, 4096/int(unsafe.Sizeof(raw{}))) {
		s.spareGs[i] = raw{} // faulted in now, not in the pause
	}
	s.spareGs = s.spareGs[:0]
	s.spareArena = make([]byte, min(len(s.arena), 4<<20)+64<<10)
	faultIn(s.spareArena)
	s.again = planReread(s, gsize)
}

// stackEnd returns, for live.Options.StackEnd, the end of the goroutine
// stack that holds sp, among those of the goroutines s found. A stack
// moved since (grown, its goroutine gone) is found where it was: a
// thread on a new stack is not found and has its stack copied as
// any other, and one found on a freed stack's memory has it copied up
// to that stack's end.
func (s *snapshot) stackEnd() func(sp uint64) (uint64, bool) {
	type span struct{ lo, hi uint64 }
	spans := make([]span, 0, len(s.gs))
	for i := range s.gs {
		if g := &s.gs[i]; g.stackLo < g.stackHi {
			spans = append(spans, span{g.stackLo, g.stackHi})
		}
	}
	sort.Slice(spans, func(a, b int) bool { return spans[a].lo < spans[b].lo })
	return func(sp uint64) (uint64, bool) {
		i := sort.Search(len(spans), func(i int) bool { return spans[i].lo > sp }) - 1
		if i < 0 || sp >= spans[i].hi {
			return 0, false
		}
		return spans[i].hi, true
	}
}

// leaveAsleep returns, for live.Options.LeaveAsleep, which threads found
// asleep before the pause may stay so, by what s (the read just before
// the pause) found: every thread but those running a goroutine (a
// running goroutine unwinds from its thread's registers) and those in a
// system call that a goroutine made outside the executable's code text
// (a cgo call, whose C frames come from the thread's registers). A
// goroutine in a system call of Go's own, an idle M and the runtime's
// own threads need no registers. A thread that runs a goroutine by the
// pause but was found asleep is shown without that goroutine's stack
// (see Set.context): it slept, so the goroutine cannot have run Go code
// since either.
func (s *snapshot) leaveAsleep(text []target.Mapping) func(live.AsleepThread) bool {
	running := map[int]bool{}
	syscall := map[int]bool{}
	for i := range s.gs {
		switch g := &s.gs[i]; {
		case g.tid == 0:
		case g.status == gRunning:
			running[g.tid] = true
		case g.status == gSyscall:
			syscall[g.tid] = true
		}
	}
	return func(t live.AsleepThread) bool {
		if running[t.TID] {
			return false
		}
		if syscall[t.TID] {
			for _, m := range text {
				if t.PC >= m.Start && t.PC < m.End {
					return true
				}
			}
			return false
		}
		return true
	}
}

// faultIn touches every page of b, so that writing it in the pause does
// not fault (a page fault costs microseconds, more in a virtual machine).
func faultIn(b []byte) {
	for i := 0; i < len(b); i += 4096 {
		b[i] = 0
	}
}

// parkedSince returns the stack g had when this snapshot (a read made
// before the pause) copied it, if g has not run since. The proof is
// g.waitsince: the runtime zeroes it whenever it runs a goroutine
// (execute, exitsyscall), and the garbage collector sets it on the
// blocked goroutines whose stacks it scans, once per cycle each, to the
// mark-termination time of the cycle before (work.tstart: 0 until a
// cycle has ended), a value no later cycle repeats. Equal, nonzero values
// in both reads, with the same status, saved registers and stack bounds,
// mean the goroutine stayed parked from before the earlier read of its g
// (and so during the copy of its stack that followed) until the pause.
// Nothing else changes a parked goroutine's frames: a channel send writes
// into a local slot of the receiver only to wake it, and the collector
// moves a stack only with its g's bounds. Copying 100,000 small stacks
// costs a page pin each, most of a pause; goroutines that have not been
// seen blocked by a collection yet (waitsince 0) are copied again.
func (s *snapshot) parkedSince(g *raw) (target.Region, bool) {
	if s == nil || g.status != gWaiting || g.waitSince == 0 || int(g.slot) >= len(s.bySlot) {
		return target.Region{}, false
	}
	i := s.bySlot[g.slot]
	if i < 0 {
		return target.Region{}, false
	}
	p := &s.gs[i]
	same := p.addr == g.addr && p.status == g.status && p.waitSince == g.waitSince && p.goid == g.goid &&
		p.waitReason == g.waitReason && p.stackLo == g.stackLo && p.stackHi == g.stackHi &&
		p.sp == g.sp && p.pc == g.pc && p.bp == g.bp && !p.stackCut && !p.scan && !g.scan
	if !same || p.stack.Addr != g.sp || uint64(len(p.stack.Data)) != min(g.stackHi-g.sp, maxStackCopy) {
		return target.Region{}, false
	}
	return p.stack, true
}

// reuse returns b[:n] when b is large enough, else a new buffer with room
// to grow (a read in the pause finds a few more goroutines than the one
// before it).
func reuse(b []byte, n int) []byte {
	if cap(b) >= n {
		return b[:n]
	}
	return make([]byte, n, n+n/4+64<<10)
}

func u64(b []byte, off int) uint64 { return binary.LittleEndian.Uint64(b[off:]) }

// readAll copies the goroutine list, every live g and the used part of
// every stack that is not running, with a few batched reads: the allgs
// slice header, the pointer array, the g structs, then stacks, Ms and
// labels together, then label strings. bias is the executable's load
// bias.
//
// prev, when not nil, is a read made shortly before (outside the pause):
// its buffers are reused.
func readAll(rd batchReader, lay *goruntime.Layout, bias uint64, prev *snapshot) (*snapshot, error) {
	if prev != nil && prev.again != nil {
		if s := readAgain(rd, lay, bias, prev); s != nil {
			return s, nil
		}
	}
	return (&snapshot{}).read(rd, lay, bias, prev)
}

// preRead is readAll made while the process runs, before the pause whose
// read compares with it: it also keeps each g's validity window (see
// validityWindow).
func preRead(rd batchReader, lay *goruntime.Layout, bias uint64) (*snapshot, error) {
	return (&snapshot{winSize: validityWindow(&lay.G)}).read(rd, lay, bias, nil)
}

// read is readAll into s.
func (s *snapshot) read(rd batchReader, lay *goruntime.Layout, bias uint64, prev *snapshot) (*snapshot, error) {
	if prev != nil {
		s.gbuf, s.ptrs, s.reads = prev.gbuf, prev.ptrs, prev.reads[:0]
		s.co.Reuse(&prev.co)
		if prev.bySlot != nil {
			// prev's goroutines and stacks are kept to compare with.
			s.gs, s.arena = prev.spareGs, prev.spareArena
		} else {
			s.gs, s.arena = prev.gs[:0], prev.arena
			prev = nil
		}
	}
	var hdr [16]byte
	reads := []live.Read{{Addr: lay.AllGs + bias, Buf: hdr[:]}}
	rd.ReadBatch(reads)
	if reads[0].N != len(hdr) {
		return nil, fmt.Errorf("cannot read runtime.allgs at %#x", lay.AllGs+bias)
	}
	ptr, n := u64(hdr[:], 0), u64(hdr[:], 8)
	if n > maxGoroutes {
		return nil, fmt.Errorf("runtime.allgs at %#x claims %d goroutines", lay.AllGs+bias, n)
	}
	if n == 0 {
		return s, nil
	}
	// The pointers and the gs they point to are read gChunk at a time,
	// so that a garbage length costs one failed read, not its memory.
	gsize := lay.G.Size
	chunk := min(int(n), gChunk)
	s.ptrs = reuse(s.ptrs, 8*chunk)
	ptrs := s.ptrs
	reads = make([]live.Read, chunk)
	if cap(s.gs) < int(n) {
		s.gs = make([]raw, 0, n+n/8)
	}
	s.slotPtrs = make([]byte, 0, 8*n)
	if s.winSize > 0 {
		s.win = make([]byte, 0, int(n)*s.winSize)
		s.rest = make([]uint64, 0, n)
	}
	for first := 0; first < int(n); first += chunk {
		k := min(chunk, int(n)-first)
		pr := []live.Read{{Addr: ptr + 8*uint64(first), Buf: ptrs[:8*k]}}
		rd.ReadBatch(pr)
		if pr[0].N != 8*k {
			return nil, fmt.Errorf("cannot read goroutine pointers %d to %d of %d at %#x", first, first+k, n, pr[0].Addr)
		}
		s.slotPtrs = append(s.slotPtrs, ptrs[:8*k]...)
		for i := range reads[:k] {
			reads[i] = live.Read{Addr: u64(ptrs, 8*i)}
		}
		lap(rd, stepList)
		s.readGs(rd, reads[:k], gsize)
		s.parseGs(reads[:k], lay, first)
		lap(rd, stepGs)
	}
	s.co.R, s.co.Gap = rd, stackGap
	s.copyStacksAndMs(&s.co, lay, prev)
	s.co.R = nil
	lap(rd, stepStacks)
	s.readLabelsOf(rd, lay)
	lap(rd, stepLabels)
	return s, nil
}

// readLabelsOf reads the pprof labels of the goroutines in s.gs.
func (s *snapshot) readLabelsOf(rd batchReader, lay *goruntime.Layout) {
	if lay.Labels.Map {
		s.readLabelMaps(rd)
	} else if lay.Labels.Supported {
		s.readLabels(rd)
	} else {
		for i := range s.gs {
			if s.gs[i].labelsPtr != 0 {
				s.notes = append(s.notes, fmt.Sprintf("pprof labels are not read for %s (a Go map before Go 1.24)", lay.GoVersion))
				break
			}
		}
	}
}

// gGap is the most unused memory read between two gs to read them with
// one iovec: a process_vm_readv iovec costs as much as copying a few
// kilobytes, and the runtime allocates gs next to each other.
const gGap = 1 << 10

// readGs fills each read's Buf with the gsize bytes at its Addr, reading
// gs that lie close together with one iovec.
func (s *snapshot) readGs(rd batchReader, reads []live.Read, gsize int) {
	order := make([]int, len(reads))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return reads[order[a]].Addr < reads[order[b]].Addr })
	type span struct{ lo, hi uint64 }
	var spans []span
	total := 0
	for _, i := range order {
		a := reads[i].Addr
		end := a + uint64(gsize)
		if end < a {
			continue // wraps: the read below fails it
		}
		if n := len(spans); n > 0 && a <= spans[n-1].hi+gGap && end-spans[n-1].lo <= 1<<20 {
			if end > spans[n-1].hi {
				total += int(end - spans[n-1].hi)
				spans[n-1].hi = end
			}
			continue
		}
		spans = append(spans, span{a, end})
		total += gsize
	}
	s.gbuf = reuse(s.gbuf, total)
	sr := make([]live.Read, len(spans))
	off := 0
	for i, sp := range spans {
		n := int(sp.hi - sp.lo)
		sr[i] = live.Read{Addr: sp.lo, Buf: s.gbuf[off : off+n : off+n]}
		off += n
	}
	rd.ReadBatch(sr)
	j := 0
	for _, i := range order {
		r := &reads[i]
		for j < len(sr) && sr[j].Addr+uint64(len(sr[j].Buf)) <= r.Addr {
			j++
		}
		r.Buf, r.N = nil, 0
		if j == len(sr) || r.Addr < sr[j].Addr {
			continue
		}
		o := int(r.Addr - sr[j].Addr)
		if o+gsize > len(sr[j].Buf) {
			continue
		}
		r.Buf = sr[j].Buf[o : o+gsize : o+gsize]
		r.N = max(0, min(gsize, sr[j].N-o))
	}
}

// parseGs decodes one batch of g structs (the gs of allgs slots first,
// first+1, ...), keeping the live, consistent ones.
func (s *snapshot) parseGs(reads []live.Read, lay *goruntime.Layout, first int) {
	gsize := lay.G.Size
	for i := range reads {
		r := &reads[i]
		if r.N != gsize || len(r.Buf) != gsize {
			s.notes = append(s.notes, fmt.Sprintf("g at %#x: unreadable, dropped", r.Addr))
			if s.winSize > 0 {
				s.win = append(s.win, make([]byte, s.winSize)...)
				s.rest = append(s.rest, 0)
			}
			continue
		}
		g := decodeG(r.Buf, &lay.G, r.Addr, first+i)
		if s.winSize > 0 {
			s.win = append(s.win, r.Buf[:s.winSize]...)
			var h uint64
			if g.status == gWaiting && g.waitSince == 0 {
				h = restHash(r.Buf[s.winSize:])
			}
			s.rest = append(s.rest, h)
		}
		s.addG(&g)
	}
}

// decodeG decodes the g at addr, read into b, of allgs slot slot.
func decodeG(b []byte, o *goruntime.GOffsets, addr uint64, slot int) raw {
	st := uint32(u64(b, o.Status))
	return raw{gFields: gFields{addr: addr, status: st &^ gScan, scan: st&gScan != 0,
		goid: int64(u64(b, o.Goid)), parent: int64(u64(b, o.ParentGoid)),
		waitReason: b[o.WaitReason], waitSince: int64(u64(b, o.WaitSince)),
		stackLo: u64(b, o.StackLo), stackHi: u64(b, o.StackHi),
		sp: u64(b, o.SchedSP), pc: u64(b, o.SchedPC), bp: u64(b, o.SchedBP),
		syscallSP: u64(b, o.SyscallSP), syscallPC: u64(b, o.SyscallPC),
		m: u64(b, o.M), lockedM: u64(b, o.LockedM), gopc: u64(b, o.GoPC), startpc: u64(b, o.StartPC),
		labelsPtr: u64(b, o.Labels)}, slot: int32(slot)}
}

// addG keeps g if it is a live, consistent goroutine; a torn one is
// dropped with a note.
func (s *snapshot) addG(g *raw) {
	if g.status == gDead || g.status == gIdle || g.status == gDeadExtra {
		return
	}
	if why := g.torn(); why != "" {
		s.notes = append(s.notes, fmt.Sprintf("goroutine %d (g %#x) dropped: torn (%s)", g.goid, g.addr, why))
		return
	}
	s.gs = append(s.gs, *g)
}

// torn says why a g's fields are not a consistent goroutine ("" when they
// are): a g being created or torn down while the process was read (a core
// of a crash in the scheduler, or a live read without a pause).
func (g *raw) torn() string {
	switch {
	case g.status > maxStatus:
		return fmt.Sprintf("status %#x", g.status)
	case g.goid <= 0:
		return fmt.Sprintf("goid %d", g.goid)
	case g.stackLo == 0 || g.stackHi <= g.stackLo || g.stackHi-g.stackLo > 1<<30:
		return fmt.Sprintf("stack [%#x, %#x)", g.stackLo, g.stackHi)
	}
	if sp := g.savedSP(); sp != 0 && (sp < g.stackLo || sp > g.stackHi) {
		return fmt.Sprintf("saved sp %#x outside its stack [%#x, %#x)", sp, g.stackLo, g.stackHi)
	}
	if g.status != gRunning && g.savedSP() == 0 {
		return "no saved registers"
	}
	return ""
}

// savedSP is where the goroutine's saved frames start: g.syscallsp in a
// system call, g.sched.sp otherwise (0 for a running goroutine).
func (g *raw) savedSP() uint64 {
	switch g.status {
	case gRunning:
		return 0
	case gSyscall:
		if g.syscallSP != 0 {
			return g.syscallSP
		}
	}
	return g.sp
}

// copyStacksAndMs copies, in one batch, the used part of each stack that
// is not running and the procid of each M a goroutine is on. The stacks
// of goroutines that have not run since prev (a read before the pause, or
// nil) copied them are taken from prev (see parkedSince).
func (s *snapshot) copyStacksAndMs(rd batchReader, lay *goruntime.Layout, prev *snapshot) {
	reads := s.reads[:0]
	if cap(reads) < len(s.gs)+16 {
		reads = make([]live.Read, 0, len(s.gs)+len(s.gs)/8+16)
	}
	defer func() { s.reads = reads }()
	total := 0
	kept := make([]bool, len(s.gs))
	for i := range s.gs {
		g := &s.gs[i]
		if st, ok := prev.parkedSince(g); ok {
			g.stack, kept[i] = st, true
			s.kept++
			continue
		}
		if sp := g.savedSP(); sp != 0 {
			total += int(min(g.stackHi-sp, maxStackCopy))
		}
	}
	budgetCut := 0
	if total > maxStackTotal {
		total = maxStackTotal
	}
	s.arena = reuse(s.arena, total)
	arena := s.arena
	used := 0
	ms := map[uint64]int{}
	for i := range s.gs {
		g := &s.gs[i]
		if sp := g.savedSP(); sp != 0 && !kept[i] {
			n := int(min(g.stackHi-sp, maxStackCopy))
			g.stackCut = g.stackHi-sp > maxStackCopy
			if used+n > len(arena) {
				n = len(arena) - used
				g.stackCut = true
				budgetCut++
			}
			reads = append(reads, live.Read{Addr: sp, Buf: arena[used : used+n : used+n]})
			used += n
		}
		if g.m != 0 && (g.status == gRunning || g.status == gSyscall) {
			if _, ok := ms[g.m]; !ok {
				ms[g.m] = -1
			}
		}
	}
	nStacks := len(reads)
	mbuf := make([]byte, 8*len(ms))
	k := 0
	for m := range ms {
		ms[m] = len(reads)
		reads = append(reads, live.Read{Addr: m + uint64(lay.M.ProcID), Buf: mbuf[8*k : 8*k+8 : 8*k+8]})
		k++
	}
	rd.ReadBatch(reads)
	if budgetCut > 0 {
		s.notes = append(s.notes, fmt.Sprintf("%d goroutines' stacks cut: more than %d bytes of stacks in all", budgetCut, maxStackTotal))
	}
	j := 0
	for i := range s.gs {
		g := &s.gs[i]
		if g.savedSP() != 0 && !kept[i] {
			r := &reads[j]
			j++
			g.stack = target.Region{Addr: r.Addr, Data: r.Buf[:r.N:r.N]}
			if r.N < len(r.Buf) && (r.N > 0 || !pastBound(rd)) {
				s.notes = append(s.notes, fmt.Sprintf("goroutine %d: stack readable for %d of %d bytes from %#x", g.goid, r.N, len(r.Buf), r.Addr))
			}
			if g.stackCut {
				s.notes = append(s.notes, fmt.Sprintf("goroutine %d: stack of %d bytes cut at %d", g.goid, g.stackHi-r.Addr, maxStackCopy))
			}
		}
		if idx, ok := ms[g.m]; ok && idx >= nStacks && reads[idx].N == 8 && (g.status == gRunning || g.status == gSyscall) {
			g.tid = int(u64(reads[idx].Buf, 0))
		}
	}
}

// readLabels reads the pprof label sets: g.labels points at a struct
// whose first field is a []struct{key, value string}. Two batches: the
// slice headers with their arrays, then the strings.
func (s *snapshot) readLabels(rd batchReader) {
	idx, reads := s.labelPointers(rd, 16)
	var arrays []live.Read
	var owners []int
	for k, r := range reads {
		if r.N != 16 {
			continue
		}
		p, n := u64(r.Buf, 0), u64(r.Buf, 8)
		if n == 0 || n > maxLabels || p == 0 {
			continue
		}
		arrays = append(arrays, live.Read{Addr: p, Buf: make([]byte, 32*n)})
		owners = append(owners, idx[k])
	}
	rd.ReadBatch(arrays)
	var strs []live.Read
	var slots []int // owner g per key/value pair
	for k, a := range arrays {
		if a.N != len(a.Buf) {
			continue
		}
		for p := 0; p < len(a.Buf)/32; p++ {
			for f := 0; f < 2; f++ {
				ptr, ln := u64(a.Buf, 32*p+16*f), u64(a.Buf, 32*p+16*f+8)
				if ln > maxLabelLen {
					ln = 0
				}
				strs = append(strs, live.Read{Addr: ptr, Buf: make([]byte, ln)})
			}
			slots = append(slots, owners[k])
		}
	}
	s.storeLabels(rd, strs, slots)
}

// labelPointers reads size bytes at g.labels of every goroutine that has
// labels, in one batch; it returns the goroutines' indexes and the reads.
func (s *snapshot) labelPointers(rd batchReader, size int) ([]int, []live.Read) {
	var owners []int
	var reads []live.Read
	for i := range s.gs {
		if s.gs[i].labelsPtr != 0 {
			owners = append(owners, i)
			reads = append(reads, live.Read{Addr: s.gs[i].labelsPtr, Buf: make([]byte, size)})
		}
	}
	if len(reads) > 0 {
		rd.ReadBatch(reads)
	}
	return owners, reads
}

// storeLabels reads the label strings, a key then its value per pair, in
// one batch and stores each complete pair in the labels of the goroutine
// owner[pair].
func (s *snapshot) storeLabels(rd batchReader, strs []live.Read, owner []int) {
	rd.ReadBatch(strs)
	for i, g := range owner {
		key, val := strs[2*i], strs[2*i+1]
		if key.N != len(key.Buf) || val.N != len(val.Buf) {
			continue
		}
		if s.gs[g].labels == nil {
			s.gs[g].labels = map[string]string{}
		}
		s.gs[g].labels[string(key.Buf)] = string(val.Buf)
	}
}

// stackGap is the most unused stack read between two goroutines' used
// stacks to copy them with one iovec: measured with BenchmarkDump, 2 KB
// (the smallest stack) shortened the pause for 100,000 goroutines from 80
// to 67 ms, 4 KB less so.
const stackGap = 2 << 10

// The runtime's hash map before Go 1.24 (runtime/map.go: hmap, bmap) as
// map[string]string lays it out: buckets of 8 slots, a tophash byte per
// slot, the 8 keys, the 8 values, an overflow pointer.
const (
	hmapSize       = 48
	bucketSize     = 8 + 8*16 + 8*16 + 8
	minTopHash     = 5 // smaller tophash values mark empty or evacuated slots
	maxBucketShift = 8
	maxOverflow    = 64
)

// readLabelMaps reads pprof labels that are a map[string]string (Go 1.22
// and 1.23): g.labels points at the map variable. Batches: the map
// pointers, the hmap headers, the buckets (then overflow buckets), the
// strings.
func (s *snapshot) readLabelMaps(rd batchReader) {
	owners, reads := s.labelPointers(rd, 8)
	var hdrs []live.Read
	var hOwners []int
	for k, r := range reads {
		if r.N == 8 && u64(r.Buf, 0) != 0 {
			hdrs = append(hdrs, live.Read{Addr: u64(r.Buf, 0), Buf: make([]byte, hmapSize)})
			hOwners = append(hOwners, owners[k])
		}
	}
	rd.ReadBatch(hdrs)
	var buckets []live.Read
	var bOwners []int
	growing := 0
	for k, h := range hdrs {
		if h.N != hmapSize || u64(h.Buf, 0) == 0 {
			continue
		}
		b := h.Buf[9]
		if b > maxBucketShift || u64(h.Buf, 16) == 0 {
			continue
		}
		if u64(h.Buf, 24) != 0 {
			growing++ // entries are split between old and new buckets
			continue
		}
		buckets = append(buckets, live.Read{Addr: u64(h.Buf, 16), Buf: make([]byte, bucketSize<<b)})
		bOwners = append(bOwners, hOwners[k])
	}
	if growing > 0 {
		s.notes = append(s.notes, fmt.Sprintf("pprof labels of %d goroutines not read: their maps were growing", growing))
	}
	var strs []live.Read
	var slots []int // owner g per key/value pair
	for round := 0; len(buckets) > 0 && round <= maxOverflow; round++ {
		rd.ReadBatch(buckets)
		var more []live.Read
		var mOwners []int
		for k, b := range buckets {
			if b.N != len(b.Buf) {
				continue
			}
			for off := 0; off+bucketSize <= len(b.Buf); off += bucketSize {
				bk := b.Buf[off : off+bucketSize]
				for i := 0; i < 8; i++ {
					if bk[i] < minTopHash {
						continue
					}
					kp, kl := u64(bk, 8+16*i), u64(bk, 8+16*i+8)
					vp, vl := u64(bk, 136+16*i), u64(bk, 136+16*i+8)
					if kl > maxLabelLen || vl > maxLabelLen {
						continue
					}
					strs = append(strs, live.Read{Addr: kp, Buf: make([]byte, kl)}, live.Read{Addr: vp, Buf: make([]byte, vl)})
					slots = append(slots, bOwners[k])
				}
				if ov := u64(bk, bucketSize-8); ov != 0 {
					more = append(more, live.Read{Addr: ov, Buf: make([]byte, bucketSize)})
					mOwners = append(mOwners, bOwners[k])
				}
			}
		}
		buckets, bOwners = more, mOwners
	}
	s.storeLabels(rd, strs, slots)
}
