package fibers

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/internal/procmaps"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/target"
)

// DefaultStackCopy is how much of a fiber's stack a Copier copies, from
// its saved stack pointer upward, when it does not know where the stack
// ends: the used part of a parked fiber's stack is usually a few
// kilobytes; a deeper one is read beyond the copy from the process.
// Copies of many fibers share stackBudget.
const DefaultStackCopy = 64 << 10

// stackBudget bounds the stack bytes copied for explicit contexts in one
// pause: 10,000 fibers get 6.5 KB each (at least minStackCopy).
const (
	stackBudget  = 64 << 20
	minStackCopy = 4 << 10
)

// directSize is what is read of a context stored in place (ucontext_t,
// jmp_buf) before its layout is known: more than any of their records.
const directSize = 512

// A Copier copies the contexts Specs name, and the used part of each
// fiber's stack, while a live target is stopped: make it with NewCopier,
// let it set the capture's options (Apply: its During above all), then
// take the fiber contexts of the snapshot's target with Contexts. Fibers
// are then unwound from the same instant as the threads, not from a
// process that has run on.
type Copier struct {
	Specs []Spec
	Arch  regs.Arch
	// StackCopy bounds the bytes copied per fiber stack (0:
	// DefaultStackCopy).
	StackCopy int
	// Tarantool, when set, finds the process's Tarantool fibers in the
	// pause (Bias: its executable's load bias); Found (filled by
	// Contexts) and FindErr are what it found.
	Tarantool *Tarantool
	Bias      uint64
	Found     []TarantoolFiber
	FindErr   error
	// Unchecked reports that the pause reached its bound
	// (live.Reader.Deadline) before every fiber was re-read in it: some
	// are as they were just before the pause, or read after it.
	Unchecked bool

	prior       []cordState // the main cord as scanned before the pause
	states      []cordState // the cords as read in the pause
	threads     []live.StoppedThread
	priorStacks map[uint64]priorStack
	explicit    explicitCopy // the explicit contexts, copied before the pause, then in it
	guardRead   live.Read
	slab        []byte          // buffer for the contexts read in the pause
	co          live.Coalescing // the fibers' re-read, its scratch faulted in beforehand
	regions     []target.Region
}

// priorStack is a fiber's stack as copied before the pause, with its Lua
// state and Lua stack when it runs Lua.
type priorStack struct {
	csw   uint32
	sp    uint64
	stack []byte
	lua   []target.Region
}

// During does the copying; see live.Options.During. Three batches: the
// pointer guard and every context (or the pointer to it); the records that
// pointers lead to, with the stack above them; the stacks of contexts
// stored in place.
func (c *Copier) During(r *live.Reader) {
	size := c.stackSize()
	// Contexts and stacks of coroutine libraries lie next to each other
	// (arrays of contexts, stacks carved from one mapping): fewer,
	// larger iovecs.
	br := &live.Coalescing{R: r, Gap: 4 << 10}
	c.explicit = c.copyExplicit(br, r.Threads(), size, c.explicit)
	for i := range c.explicit.ctx {
		c.keep(c.explicit.ctx[i : i+1])
		c.keep(c.explicit.stacks[i : i+1])
	}
	if c.guardRead.N == 8 {
		c.keep([]live.Read{c.guardRead})
	}
	if c.Tarantool != nil {
		t := c.Tarantool
		c.threads = r.Threads()
		c.Unchecked = false // of the last call, when During runs again
		c.states, c.FindErr = t.rescan(r, &c.co, c.prior, t.cords(r, c.Bias, c.threads))
		if r.Expired() {
			// The stacks of fibers that ran since their copy are read
			// from the process once it runs again.
			c.Unchecked = true
			return
		}
		c.copyChanged(r, size)
	}
}

// copyChanged copies, in the pause, the stacks and Lua stacks of the
// fibers that have run since their copy before it (their switch count or
// saved SP moved), or were not there then. The rest of the bookkeeping
// waits for Contexts, after the pause.
func (c *Copier) copyChanged(r *live.Reader, size int) {
	t := c.Tarantool
	var changed []TarantoolFiber
	for _, st := range c.states {
		for i, f := range st.fibers {
			if uint64(len(st.fbufs[i])) < t.fiberSize {
				continue
			}
			tf := t.fiberFields(f, st.fbufs[i])
			if p, ok := c.priorStacks[tf.Context]; ok && p.csw == tf.csw && p.sp == tf.SP {
				continue
			}
			changed = append(changed, tf)
		}
	}
	stacks := c.stackReads(changed, size)
	r.ReadBatch(stacks)
	c.keep(stacks)
	for _, l := range t.luaCopies(r, changed) {
		c.regions = append(c.regions, l...)
	}
}

// tarantoolRegions lists the fibers found in the pause (c.Found) and adds
// what describes them as of the pause: each context's saved SP (read with
// its fiber) and, for fibers that had not run since their copy before the
// pause, that copy.
func (c *Copier) tarantoolRegions(mem target.Memory) {
	c.Found = c.Tarantool.collect(mem, c.states, c.threads)
	c.regions = slices.Grow(c.regions, 3*len(c.Found))
	sps := make([]byte, 8*len(c.Found))
	for i, f := range c.Found {
		b := sps[8*i : 8*i+8 : 8*i+8]
		binary.LittleEndian.PutUint64(b, f.SP)
		c.regions = append(c.regions, target.Region{Addr: f.Context, Data: b})
		if p, ok := c.priorStacks[f.Context]; ok && p.csw == f.csw && p.sp == f.SP {
			c.regions = append(c.regions, target.Region{Addr: f.SP, Data: p.stack})
			c.regions = append(c.regions, p.lua...)
		}
	}
}

// stackReads are the reads of the used part of each fiber's stack, from
// its saved stack pointer to its top (at most size bytes); one per fiber,
// empty for a fiber without a saved stack pointer.
func (c *Copier) stackReads(fs []TarantoolFiber, size int) []live.Read {
	reads := make([]live.Read, len(fs))
	for i, f := range fs {
		if f.SP == 0 {
			continue
		}
		n := uint64(size)
		if hi := f.StackHi; hi > f.SP && hi-f.SP < n {
			n = hi - f.SP
		}
		reads[i] = live.Read{Addr: f.SP, Buf: make([]byte, n)}
	}
	return reads
}

// directSP is the saved stack pointer of a context stored in place.
func directSP(arch regs.Arch, kind string, rec []byte, guard uint64, haveGuard bool) (uint64, bool) {
	l, ok := layouts()[arch][kind]
	if !ok || l.spSlot < 0 {
		return 0, false
	}
	s := l.slots[l.spSlot]
	v := binary.LittleEndian.Uint64(rec[s.off:])
	if s.mangled {
		if !haveGuard {
			return 0, false
		}
		v = demangle(v, guard)
	}
	return v, v != 0
}

// keep stores what reads got as regions.
func (c *Copier) keep(reads []live.Read) {
	for _, rd := range reads {
		if rd.N > 0 {
			c.regions = append(c.regions, target.Region{Addr: rd.Addr, Data: rd.Buf[:rd.N]})
		}
	}
}

// MapsHint is what to pass as live.Options.MapsHint: the size of
// /proc/PID/maps expected from the fibers found before the pause (a stack
// and its guard page each, 80 bytes a line).
func (c *Copier) MapsHint() int {
	n := len(c.Specs)
	for _, st := range c.prior {
		n += len(st.fibers)
	}
	return n * 2 * 80
}

// Apply sets the capture options the copier needs: During, and for a
// process with thousands of fibers (tens of thousands of mappings) the
// maps handling that keeps the pause short (live.Options.MapsHint,
// MapsBeforePause).
func (c *Copier) Apply(o *live.Options) {
	o.During = c.During
	o.MapsHint = c.MapsHint()
	o.MapsBeforePause = o.MapsHint > 256<<10
}

// Memory returns the copies over next (the snapshot's memory): reads they
// do not cover go to next. Thousands of fibers make thousands of copies,
// so they are merged and searched by address (target.Snapshot's linear
// scan suits a few thread stacks).
func (c *Copier) Memory(next target.Memory) target.Memory {
	return newSortedMemory(c.regions, next)
}

// sortedMemory is disjoint copied regions sorted by address, over next.
type sortedMemory struct {
	regions []target.Region
	next    target.Memory
}

// newSortedMemory merges overlapping or adjacent regions (copies made in
// one pause agree where they overlap), each merged run copied once.
func newSortedMemory(regions []target.Region, next target.Memory) *sortedMemory {
	rs := slices.Clone(regions)
	slices.SortFunc(rs, func(a, b target.Region) int { return cmp.Compare(a.Addr, b.Addr) })
	rs = slices.DeleteFunc(rs, func(r target.Region) bool { return len(r.Data) == 0 })
	var out []target.Region
	for i := 0; i < len(rs); {
		lo, hi := rs[i].Addr, rs[i].Addr+uint64(len(rs[i].Data))
		j := i + 1
		for j < len(rs) && rs[j].Addr <= hi {
			hi = max(hi, rs[j].Addr+uint64(len(rs[j].Data)))
			j++
		}
		if j == i+1 {
			out = append(out, rs[i])
		} else {
			data := make([]byte, hi-lo)
			for _, r := range rs[i:j] {
				copy(data[r.Addr-lo:], r.Data)
			}
			out = append(out, target.Region{Addr: lo, Data: data})
		}
		i = j
	}
	return &sortedMemory{regions: out, next: next}
}

// ReadMemory reads from the region holding [addr, addr+len(p)), else from
// next.
func (m *sortedMemory) ReadMemory(addr uint64, p []byte) error {
	i := sort.Search(len(m.regions), func(i int) bool { return m.regions[i].Addr > addr }) - 1
	if i >= 0 && m.regions[i].Contains(addr, len(p)) {
		copy(p, m.regions[i].Data[addr-m.regions[i].Addr:])
		return nil
	}
	if m.next != nil {
		return m.next.ReadMemory(addr, p)
	}
	return &target.MemoryError{Addr: addr}
}

// NewCopier prepares the copying of a live process's fibers: the explicit
// contexts specs name and, with auto, those of the fiber runtimes rewind
// recognizes (Tarantool), whose layout it reads from the executable now,
// before anything stops. Problems that leave fibers out (an unrecognized
// runtime, a layout without debug information) go to warn.
func NewCopier(pid int, specs []Spec, auto bool, warn func(string)) *Copier {
	c := &Copier{Specs: specs, Arch: live.HostArch}
	if len(specs) > 0 {
		// A first copy while the process runs: in the pause, the
		// stacks of fibers that have not run since are not read again.
		rd := live.NewReader(pid)
		threads := []live.StoppedThread(nil)
		c.explicit = c.copyExplicit(&live.Coalescing{R: rd, Gap: 4 << 10}, threads, c.stackSize(), explicitCopy{})
		// The pause's buffer for the contexts, its pages faulted in now.
		c.slab = make([]byte, len(specs)*directSize)
		for i := 0; i < len(c.slab); i += 4096 {
			c.slab[i] = 1
		}
	}
	if !auto {
		return c
	}
	c.findTarantool(pid, warn)
	return c
}

// ScanLive finds saved contexts in a live process's writable memory (see
// Scan), within lim, before a capture: a first, registers-only capture
// gives the threads' thread pointers, hence the pointer guard; the contexts
// found are then copied, with the threads, in the capture that follows,
// like explicit ones. The scan reads the running process.
func ScanLive(pid int, lim ScanLimits) ([]Spec, ScanStats, error) {
	snap, err := live.Capture(pid, live.Options{MaxStack: -1})
	if err != nil {
		return nil, ScanStats{}, err
	}
	maps, err := procmaps.Read(pid)
	if err != nil {
		return nil, ScanStats{}, err
	}
	in := ScanInput{Mem: live.NewReader(pid), Maps: maps}
	for _, th := range snap.Threads {
		if th.TP != 0 && !in.HaveGuard {
			if g, err := readU64(in.Mem, th.TP+0x30); err == nil {
				in.Guard, in.HaveGuard = g, true
			}
		}
	}
	in.FcontextN = fcontextSizeIn(maps)
	specs, st := Scan(in, lim)
	return specs, st, nil
}

// ScanCore is ScanLive for a core's target tg (x86-64): its mappings and
// anon, the core's anonymous memory (corefile's AnonymousSegments), which
// holds the heap and the stacks; the pointer guard comes from its threads'
// TCB in the core.
func ScanCore(tg *target.Target, anon []target.Mapping, lim ScanLimits) ([]Spec, ScanStats, error) {
	if tg.Arch != regs.AMD64 {
		return nil, ScanStats{}, fmt.Errorf("--fiber-scan knows x86-64's saved contexts, not %s's", tg.Arch)
	}
	maps := slices.Clone(anon)
	for _, m := range tg.Space.Mappings() {
		maps = append(maps, *m)
	}
	in := ScanInput{Mem: tg.Mem, Maps: maps}
	if g, err := pointerGuard(tg, tg.Mem); err == nil {
		in.Guard, in.HaveGuard = g, true
	}
	in.FcontextN = fcontextSizeIn(maps)
	specs, st := Scan(in, lim)
	return specs, st, nil
}

// fcontextSizeIn decodes the fcontext record size from the jump_fcontext
// of a mapped boost.context library, 0 when there is none.
func fcontextSizeIn(maps []target.Mapping) uint64 {
	seen := map[string]bool{}
	for _, m := range maps {
		if !strings.Contains(m.Path, "boost_context") || seen[m.Path] {
			continue
		}
		seen[m.Path] = true
		f, err := elfobj.Open(m.Path)
		if err != nil {
			continue
		}
		ext, _ := f.FunctionExtents([]string{"jump_fcontext"})
		e, ok := ext["jump_fcontext"]
		if ok {
			code := make([]byte, min(e.End-e.Start, 96))
			if f.ReadVaddr(e.Start, code) == nil {
				if n, _, err := decodeJumpFcontext(code); err == nil {
					f.Close()
					return n
				}
			}
		}
		f.Close()
	}
	return 0
}

// findTarantool loads the Tarantool layout of process pid's executable and
// reads its main cord's fibers, for During.
func (c *Copier) findTarantool(pid int, warn func(string)) {
	procExe := fmt.Sprintf("/proc/%d/exe", pid)
	t, err := NewTarantool(procExe)
	switch {
	case err != nil:
		warn(fmt.Sprintf("fibers: %v", err))
	case t == nil:
		warn("fibers: no fiber runtime recognized in the executable (rewind finds Tarantool's fibers by itself; give other saved contexts with --fiber KIND@ADDR)")
	default:
		c.Tarantool = t
		if t.pie {
			exe, _ := os.Readlink(procExe)
			maps, _ := procmaps.Read(pid)
			c.Bias = t.biasIn(maps, exe)
		}
		// Read the main cord's fiber list while the process runs: in
		// the pause, one batch re-reads those fibers and checks that
		// they still link the same way, instead of a read per fiber.
		// Their stacks are copied now too; in the pause only those of
		// fibers that ran since (their switch count or saved stack
		// pointer moved) are copied again. What other fibers may have
		// written into a parked fiber's stack (a message for it) is data,
		// not frames.
		rd := live.NewReader(pid)
		c.prior, _ = t.scan(rd, []uint64{t.mainCord + c.Bias})
		total := 0
		for i := range c.prior {
			c.prior[i].slab = make([]byte, len(c.prior[i].fibers)*int(t.fiberSize))
			for k := 0; k < len(c.prior[i].slab); k += 4096 {
				c.prior[i].slab[k] = 1
			}
			total += len(c.prior[i].slab) + int(t.cordSize)
		}
		c.co.Prepare(total + total/8)
		pf := t.collect(rd, c.prior, nil)
		stacks := c.stackReads(pf, DefaultStackCopy)
		rd.ReadBatch(stacks)
		lua := t.luaCopies(rd, pf)
		c.priorStacks = map[uint64]priorStack{}
		for i, f := range pf {
			if stacks[i].N > 0 {
				c.priorStacks[f.Context] = priorStack{f.csw, f.SP, stacks[i].Buf[:stacks[i].N], lua[i]}
			}
		}
	}
}

// Contexts returns the fiber contexts the copies hold, for tg (the
// snapshot's target): the explicit ones, then the runtime's, each over
// the copies; a runtime's problem goes to warn.
func (c *Copier) Contexts(tg *target.Target, warn func(string)) []target.Context {
	if c.Tarantool != nil && c.Found == nil {
		c.tarantoolRegions(tg.Mem)
	}
	mem := c.Memory(tg.Mem)
	out := Explicit(tg, c.Specs, mem)
	if c.FindErr != nil {
		warn(fmt.Sprintf("fibers: %v", c.FindErr))
	}
	if c.Unchecked {
		warn("fibers: the pause reached its bound (--max-pause) before every fiber was re-read in it: those that ran since their copy just before the pause are shown as read after it, and fibers created meanwhile may be missing")
	}
	if c.Tarantool != nil {
		c.Tarantool.LuaFrames(mem, c.Found)
	}
	return append(out, TarantoolContexts(tg, c.Found, mem)...)
}

// FromCore returns the fiber contexts of a core's target: the explicit
// ones specs name and, with auto, those of a recognized runtime
// (Tarantool), read from the core.
func FromCore(tg *target.Target, specs []Spec, auto bool, warn func(string)) []target.Context {
	out := Explicit(tg, specs, nil)
	if !auto {
		return out
	}
	exe := executable(tg)
	if exe == nil || exe.Module == nil {
		warn("fibers: the core's executable is unknown")
		return out
	}
	t, err := NewTarantool(exe.Module.Path)
	switch {
	case err != nil:
		warn(fmt.Sprintf("fibers: %v", err))
		return out
	case t == nil:
		warn("fibers: no fiber runtime recognized in the executable (rewind finds Tarantool's fibers by itself; give other saved contexts with --fiber KIND@ADDR)")
		return out
	}
	var threads []live.StoppedThread
	for _, ctx := range tg.Threads() {
		threads = append(threads, live.StoppedThread{TID: ctx.TID, TP: ctx.TP})
	}
	found, err := t.Find(tg.Mem, exe.Bias, threads)
	if err != nil {
		warn(fmt.Sprintf("fibers: %v", err))
	}
	t.LuaFrames(tg.Mem, found)
	return append(out, TarantoolContexts(tg, found, nil)...)
}

// executable is the mapping of the target's executable: the lowest
// file mapping with a module (executables load below their libraries).
func executable(tg *target.Target) *target.Mapping {
	for _, m := range tg.Space.Mappings() {
		if m.Module != nil && m.IsFile() {
			return m
		}
	}
	return nil
}

// stackSize is how much of each explicit context's stack is copied.
func (c *Copier) stackSize() int {
	size := c.StackCopy
	if size <= 0 {
		size = DefaultStackCopy
		if n := len(c.Specs); n > 0 {
			size = max(min(size, stackBudget/n), minStackCopy)
		}
	}
	return size
}

// explicitCopy is what was copied for the explicit contexts: per spec, the
// context (or the pointer to it) and the stack from its saved stack
// pointer (empty Reads where there is none).
type explicitCopy struct {
	ctx    []live.Read
	stacks []live.Read
}

// recordPeek is how much of a pointed-to record (libcoro, fcontext) is
// compared to tell whether its fiber ran since an earlier copy.
const recordPeek = 0x60

// copyExplicit reads the explicit contexts and their stacks through br:
// the contexts (and the pointer guard) in one batch; then, for the
// contexts that read as in prior (copied earlier, before the pause; for a
// record behind a pointer, its first bytes re-read and compared), prior's
// stack is kept; the others' stacks are read in one more batch. A fiber
// that has not run since has the same saved registers, and so the same
// frames.
func (c *Copier) copyExplicit(br live.BatchReader, threads []live.StoppedThread, size int, prior explicitCopy) explicitCopy {
	n := len(c.Specs)
	cp := explicitCopy{ctx: make([]live.Read, n), stacks: make([]live.Read, n)}
	slab := c.slab
	c.slab = nil
	if len(slab) < n*directSize {
		slab = make([]byte, n*directSize)
	}
	batch := make([]live.Read, 0, n+1)
	c.guardRead = live.Read{}
	for _, th := range threads {
		if th.TP != 0 {
			c.guardRead = live.Read{Addr: th.TP + 0x30, Buf: make([]byte, 8)}
			break
		}
	}
	for i, sp := range c.Specs {
		buf := slab[i*directSize : (i+1)*directSize : (i+1)*directSize]
		switch {
		case sp.Kind == Regs:
			continue // its stack is read below
		case layouts()[c.Arch][sp.Kind].indirect || sp.Kind == FContext:
			cp.ctx[i] = live.Read{Addr: sp.Addr, Buf: buf[:8]}
		default:
			cp.ctx[i] = live.Read{Addr: sp.Addr, Buf: buf}
		}
	}
	batch = append(batch, cp.ctx...)
	if c.guardRead.Buf != nil {
		batch = append(batch, c.guardRead)
	}
	br.ReadBatch(batch)
	copy(cp.ctx, batch[:n])
	if c.guardRead.Buf != nil {
		c.guardRead = batch[n]
	}
	guard, haveGuard := uint64(0), c.guardRead.N == 8
	if haveGuard {
		guard = binary.LittleEndian.Uint64(c.guardRead.Buf)
	}
	// Where each stack copy starts.
	lo := make([]uint64, n)
	for i, sp := range c.Specs {
		rd := &cp.ctx[i]
		switch {
		case sp.Kind == Regs:
			lo[i] = sp.SP - min(sp.SP, 128)
		case rd.N == 8 && len(rd.Buf) == 8:
			lo[i] = binary.LittleEndian.Uint64(rd.Buf) // the record, then the stack above it
		case rd.N == directSize:
			if s, ok := directSP(c.Arch, sp.Kind, rd.Buf, guard, haveGuard); ok {
				lo[i] = s - min(s, 128)
			}
		}
	}
	// Unchanged since prior? Records behind pointers are peeked at.
	same := make([]bool, n)
	var peeks []live.Read
	var peekOf []int
	for i := range c.Specs {
		if i >= len(prior.ctx) || lo[i] == 0 || prior.stacks[i].Addr != lo[i] || prior.stacks[i].N < recordPeek ||
			!bytes.Equal(prior.ctx[i].Buf[:prior.ctx[i].N], cp.ctx[i].Buf[:cp.ctx[i].N]) {
			continue
		}
		if len(cp.ctx[i].Buf) == 8 {
			peeks = append(peeks, live.Read{Addr: lo[i], Buf: make([]byte, recordPeek)})
			peekOf = append(peekOf, i)
			continue
		}
		same[i] = true
	}
	br.ReadBatch(peeks)
	for k, p := range peeks {
		i := peekOf[k]
		same[i] = p.N == recordPeek && bytes.Equal(p.Buf, prior.stacks[i].Buf[:recordPeek])
	}
	var reads []live.Read
	var readOf []int
	for i := range c.Specs {
		switch {
		case same[i]:
			cp.stacks[i] = prior.stacks[i]
		case lo[i] != 0:
			reads = append(reads, live.Read{Addr: lo[i], Buf: make([]byte, size)})
			readOf = append(readOf, i)
		}
	}
	br.ReadBatch(reads)
	for k, rd := range reads {
		cp.stacks[readOf[k]] = rd
	}
	return cp
}
