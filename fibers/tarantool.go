package fibers

import (
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/rewindstack/rewind/internal/fsafe"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/runtimes/luajit"
	"github.com/rewindstack/rewind/target"
)

// Tarantool's fibers live in cords, one per thread that runs fibers: the
// main thread's is the global main_cord, every other's is pointed to by
// the thread-local cord_ptr. A cord holds its running fiber (cord->fiber),
// its scheduler fiber (cord->sched, embedded) and the list of its other
// fibers (cord->alive, linked through fiber->link); cord->id is its
// thread's pthread_t, which glibc makes the thread pointer. Each fiber's
// libcoro context (fiber->ctx, a coro_context) holds the stack pointer its
// last switch saved. Every offset is read from the binary's DWARF types:
// Tarantool changed these structures between releases.

// ErrTarantoolLayout is returned for a Tarantool binary without the DWARF
// types of its fibers and cords: it is recognized, but no stack is guessed.
var ErrTarantoolLayout = errors.New("Tarantool recognized (main_cord), but its layout is unknown: the binary has no DWARF types for struct fiber and struct cord (install its debug information)")

// maxFibersPerCord bounds a walk of a cord's fiber list (a loop in
// damaged memory ends there).
const maxFibersPerCord = 1 << 20

// Tarantool reads the fibers of a Tarantool process (live or core), given
// the layout of its executable.
type Tarantool struct {
	mainCord  uint64 // main_cord's address in the executable
	cordPtr   uint64 // cord_ptr's TLS offset (st_value)
	tlsOffset uint64 // the executable's TLS block ends tlsOffset below the thread pointer
	hasTLS    bool
	pie       bool   // ET_DYN: addresses move by the load bias
	firstLoad uint64 // the first PT_LOAD's page-aligned address

	// struct fiber
	fiberSize, fCtx, fFid, fCsw, fLink, fName uint64
	fStack, fStackSize                        uint64 // 0, 0 when the binary has no such members
	nameIsPtr                                 bool
	nameLen                                   uint64 // inline array length
	// struct cord
	cordSize, cFiber, cID, cAlive, cSched uint64

	lua    luajit.Layout // LuaJIT's structures, when hasLua
	luaL   uint64        // fiber->storage.lua.stack: the fiber's lua_State
	hasLua bool
}

// NewTarantool reads the layout of Tarantool's fibers from the executable
// at path. It returns nil and no error when the executable is not
// Tarantool (no main_cord), and ErrTarantoolLayout when it is but its DWARF
// types are missing.
func NewTarantool(path string) (t *Tarantool, err error) {
	fh, _, err := fsafe.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	defer func() {
		if r := recover(); r != nil { // debug/elf and debug/dwarf on hostile files
			t, err = nil, fmt.Errorf("%s: malformed ELF or DWARF: %v", path, r)
		}
	}()
	ef, err := elf.NewFile(fh)
	if err != nil {
		return nil, err
	}
	syms, _ := ef.Symbols()
	t = &Tarantool{}
	found := false
	for _, s := range syms {
		switch {
		case s.Name == "main_cord" && elf.ST_TYPE(s.Info) == elf.STT_OBJECT:
			t.mainCord, found = s.Value, true
		case s.Name == "cord_ptr" && elf.ST_TYPE(s.Info) == elf.STT_TLS:
			t.cordPtr, t.hasTLS = s.Value, true
		}
	}
	if !found {
		return nil, nil
	}
	t.pie = ef.Type == elf.ET_DYN
	t.firstLoad = ^uint64(0)
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD {
			t.firstLoad = min(t.firstLoad, p.Vaddr&^0xfff)
		}
		if p.Type == elf.PT_TLS && p.Align > 0 {
			// x86-64 (TLS variant II): the executable's block is the
			// first below the thread pointer; glibc rounds its size to
			// the alignment, keeping the first byte's offset modulo it.
			first := p.Vaddr & (p.Align - 1)
			t.tlsOffset = (p.Memsz-first+p.Align-1)/p.Align*p.Align + first
		}
	}
	d, err := ef.DWARF()
	if err != nil {
		return nil, ErrTarantoolLayout
	}
	fiber, cord := luajit.StructType(d, "fiber"), luajit.StructType(d, "cord")
	if fiber == nil || cord == nil {
		return nil, ErrTarantoolLayout
	}
	member := func(st *dwarf.StructType, name string) (*dwarf.StructField, bool) {
		for _, f := range st.Field {
			if f.Name == name {
				return f, true
			}
		}
		return nil, false
	}
	offs := func(st *dwarf.StructType, names ...string) ([]uint64, bool) {
		var out []uint64
		for _, n := range names {
			f, ok := member(st, n)
			if !ok {
				return nil, false
			}
			out = append(out, uint64(f.ByteOffset))
		}
		return out, true
	}
	fo, ok1 := offs(fiber, "ctx", "fid", "csw", "link", "name")
	co, ok2 := offs(cord, "fiber", "id", "alive", "sched")
	if !ok1 || !ok2 {
		return nil, ErrTarantoolLayout
	}
	t.fiberSize, t.cordSize = uint64(fiber.ByteSize), uint64(cord.ByteSize)
	t.fCtx, t.fFid, t.fCsw, t.fLink, t.fName = fo[0], fo[1], fo[2], fo[3], fo[4]
	t.cFiber, t.cID, t.cAlive, t.cSched = co[0], co[1], co[2], co[3]
	if so, ok := offs(fiber, "stack", "stack_size"); ok {
		t.fStack, t.fStackSize = so[0], so[1]
	}
	// A fiber without a lua_State runs no Lua: LuaJIT's types are not
	// looked for (each lookup scans the DWARF).
	if luaL, ok := luajit.FieldOffset(fiber, "storage", "lua", "stack"); ok {
		t.luaL = luaL
		t.lua, t.hasLua = luajit.LayoutFrom(d)
	}
	nf, _ := member(fiber, "name")
	switch nt := nf.Type.(type) {
	case *dwarf.PtrType:
		t.nameIsPtr = true
	case *dwarf.ArrayType:
		t.nameLen = uint64(max(nt.Count, 0))
	}
	if t.fiberSize == 0 || t.cordSize == 0 || t.fiberSize > 1<<16 || t.cordSize > 1<<20 {
		return nil, ErrTarantoolLayout
	}
	return t, nil
}

// TarantoolFiber is one inactive fiber found in a cord.
type TarantoolFiber struct {
	// TID is the thread of the fiber's cord, 0 when no thread matched.
	TID  int
	ID   uint32
	Name string
	// Context is the address of the fiber's coro_context.
	Context uint64
	// NeverRan is set for a fiber created but not yet started (no
	// context switch into it yet): its context is libcoro's start-up
	// frame.
	NeverRan bool
	// SP is the stack pointer saved in the context (its coro_context's
	// first word).
	SP uint64
	// csw counts the switches into the fiber: unchanged (with SP), the
	// fiber has not run, so its frames are what an earlier read saw.
	csw uint32
	// StackHi is the top of the fiber's stack (it grows down from
	// there), 0 when unknown (the scheduler fiber runs on the thread's).
	StackHi uint64
	// L is the fiber's lua_State, 0 when it runs no Lua; Lua its Lua
	// frames, innermost first (see LuaFrames).
	L   uint64
	Lua []luajit.Frame
}

// Find lists the inactive fibers of every cord, reading mem: inside a live
// capture's pause (live.Options.During), the live.Reader; for a core, its
// memory. bias is the executable's load bias (0 unless it is a PIE);
// threads are the process's threads with their thread pointers. The
// running fiber of each cord is left out: its stack is the thread's own.
func (t *Tarantool) Find(mem target.Memory, bias uint64, threads []live.StoppedThread) ([]TarantoolFiber, error) {
	states, err := t.scan(mem, t.cords(mem, bias, threads))
	return t.collect(mem, states, threads), err
}

// cordState is one cord as read: its bytes, and its fibers (the scheduler
// first, then the alive list in order) with their bytes.
type cordState struct {
	addr   uint64
	cbuf   []byte
	fibers []uint64
	fbufs  [][]byte
	slab   []byte // where rescan reads the fibers again, faulted in beforehand
}

// cords returns the cords' addresses: main_cord, then every thread's
// cord_ptr.
func (t *Tarantool) cords(mem target.Memory, bias uint64, threads []live.StoppedThread) []uint64 {
	cords := []uint64{t.mainCord + bias}
	seen := map[uint64]bool{t.mainCord + bias: true}
	for _, th := range threads {
		if th.TP == 0 || !t.hasTLS || t.tlsOffset == 0 {
			continue
		}
		p, err := readU64(mem, th.TP-t.tlsOffset+t.cordPtr)
		if err == nil && p != 0 && !seen[p] {
			seen[p] = true
			cords = append(cords, p)
		}
	}
	return cords
}

// scan reads cords and chases their fiber lists, one read per fiber (its
// whole struct, which holds the link to the next).
func (t *Tarantool) scan(mem target.Memory, cords []uint64) ([]cordState, error) {
	var out []cordState
	for _, cord := range cords {
		st, err := t.chase(mem, cord)
		if err != nil {
			return out, err
		}
		out = append(out, st)
	}
	return out, nil
}

func (t *Tarantool) chase(mem target.Memory, cord uint64) (cordState, error) {
	st := cordState{addr: cord, cbuf: make([]byte, t.cordSize)}
	if err := mem.ReadMemory(cord, st.cbuf); err != nil {
		return st, fmt.Errorf("Tarantool cord at %#x: %w", cord, err)
	}
	sched := cord + t.cSched
	st.fibers = append(st.fibers, sched)
	st.fbufs = append(st.fbufs, st.cbuf[t.cSched:min(t.cSched+t.fiberSize, t.cordSize)])
	head := cord + t.cAlive
	node := binary.LittleEndian.Uint64(st.cbuf[t.cAlive+8:]) // rlist: prev, next
	// A list that loops without passing its head again (damaged memory)
	// is caught by Brent's cycle detection: mark is re-anchored at every
	// power of two steps.
	mark, power := uint64(0), 1
	for n := 0; node != head; n++ {
		if node == 0 || node == mark || n >= maxFibersPerCord || node < t.fLink {
			return st, fmt.Errorf("Tarantool cord at %#x: its fiber list is broken after %d fibers", cord, n)
		}
		if n+1 == power {
			mark, power = node, power*2
		}
		f := node - t.fLink
		fbuf := make([]byte, t.fiberSize)
		if err := mem.ReadMemory(f, fbuf); err != nil {
			return st, fmt.Errorf("Tarantool cord at %#x: fiber %d of its list: %w", cord, n, err)
		}
		st.fibers = append(st.fibers, f)
		st.fbufs = append(st.fbufs, fbuf)
		node = binary.LittleEndian.Uint64(fbuf[t.fLink+8:])
	}
	return st, nil
}

// rescan re-reads, with one batch, cords and fibers scanned before the
// pause (prior, read while the process ran), and keeps each cord whose
// list still links the same fibers in the same order; the others (and
// cords that are new) are chased again. In the pause this costs two
// batches instead of a read per fiber.
func (t *Tarantool) rescan(r *live.Reader, co *live.Coalescing, prior []cordState, cords []uint64) ([]cordState, error) {
	byAddr := map[uint64]*cordState{}
	for i := range prior {
		byAddr[prior[i].addr] = &prior[i]
	}
	var reads []live.Read
	var owners []int // index in cords of each read's cord
	var states []cordState
	for _, cord := range cords {
		p := byAddr[cord]
		if p == nil {
			continue
		}
		st := cordState{addr: cord, cbuf: make([]byte, t.cordSize), fibers: p.fibers}
		states = append(states, st)
		ci := len(states) - 1
		reads = append(reads, live.Read{Addr: cord, Buf: states[ci].cbuf})
		owners = append(owners, ci)
		slab := p.slab
		if len(slab) < len(p.fibers)*int(t.fiberSize) {
			slab = make([]byte, len(p.fibers)*int(t.fiberSize))
		}
		for k, f := range p.fibers[1:] {
			reads = append(reads, live.Read{Addr: f, Buf: slab[k*int(t.fiberSize) : (k+1)*int(t.fiberSize)]})
			owners = append(owners, ci)
		}
	}
	// Fibers come from Tarantool's mempool slabs, next to each other: a
	// few large iovecs read them all.
	if co == nil {
		co = &live.Coalescing{}
	}
	co.R, co.Gap = r, 4<<10
	co.ReadBatch(reads)
	for i, rd := range reads {
		st := &states[owners[i]]
		if rd.N != len(rd.Buf) {
			st.fibers = nil // unreadable now: chase it
			continue
		}
		if rd.Addr == st.addr {
			st.fbufs = append(st.fbufs, st.cbuf[t.cSched:min(t.cSched+t.fiberSize, t.cordSize)])
		} else {
			st.fbufs = append(st.fbufs, rd.Buf)
		}
	}
	var out []cordState
	known := map[uint64]bool{}
	for i := range states {
		st := &states[i]
		known[st.addr] = true
		if st.fibers != nil && t.linked(st) {
			out = append(out, *st)
			continue
		}
		c, err := t.chase(r, st.addr)
		if err != nil {
			return out, err
		}
		out = append(out, c)
	}
	for _, cord := range cords {
		if !known[cord] {
			c, err := t.chase(r, cord)
			if err != nil {
				return out, err
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// linked reports whether st's fiber bytes still link its fibers in order,
// from the cord's alive list head back to it.
func (t *Tarantool) linked(st *cordState) bool {
	if len(st.fbufs) != len(st.fibers) {
		return false
	}
	le := binary.LittleEndian
	head := st.addr + t.cAlive
	next := le.Uint64(st.cbuf[t.cAlive+8:])
	for i := 1; i < len(st.fibers); i++ {
		if next != st.fibers[i]+t.fLink {
			return false
		}
		next = le.Uint64(st.fbufs[i][t.fLink+8:])
	}
	return next == head
}

// collect turns cord states into the inactive fibers.
func (t *Tarantool) collect(mem target.Memory, states []cordState, threads []live.StoppedThread) []TarantoolFiber {
	byTP := map[uint64]int{}
	for _, th := range threads {
		if th.TP != 0 {
			byTP[th.TP] = th.TID
		}
	}
	le := binary.LittleEndian
	var out []TarantoolFiber
	for _, st := range states {
		running := le.Uint64(st.cbuf[t.cFiber:])
		tid := byTP[le.Uint64(st.cbuf[t.cID:])]
		for i, f := range st.fibers {
			fbuf := st.fbufs[i]
			if f == running || uint64(len(fbuf)) < t.fiberSize {
				continue
			}
			tf := t.fiberFields(f, fbuf)
			tf.TID, tf.ID = tid, le.Uint32(fbuf[t.fFid:])
			tf.NeverRan = tf.csw == 0
			tf.Name = t.fiberName(mem, f, fbuf)
			out = append(out, tf)
		}
	}
	return out
}

// fiberName reads a fiber's name: a pointer (usually to its inline_name)
// or an inline array.
func (t *Tarantool) fiberName(mem target.Memory, f uint64, fbuf []byte) string {
	var b []byte
	if t.nameIsPtr {
		p := binary.LittleEndian.Uint64(fbuf[t.fName:])
		if p == 0 {
			return ""
		}
		if p >= f && p < f+t.fiberSize {
			b = fbuf[p-f:] // its inline_name: no read
		} else if b = make([]byte, 64); mem.ReadMemory(p, b) != nil {
			return ""
		}
	} else {
		b = fbuf[t.fName:min(t.fName+t.nameLen, uint64(len(fbuf)))]
	}
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

func readU64(mem target.Memory, addr uint64) (uint64, error) {
	var b [8]byte
	if err := mem.ReadMemory(addr, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// TarantoolContexts turns found fibers into fiber contexts over mem (their
// libcoro contexts read through it), one per fiber; a context that cannot
// be read has Err set.
func TarantoolContexts(tg *target.Target, found []TarantoolFiber, mem target.Memory) []target.Context {
	if mem == nil {
		mem = tg.Mem
	}
	out := make([]target.Context, 0, len(found))
	for _, f := range found {
		c := withRegs(tg, mem, Spec{Kind: Coro, Addr: f.Context}, target.Context{Kind: target.KindFiber,
			Runtime: "tarantool", TID: f.TID, ID: int64(f.ID), HasID: true, Name: f.Name, Saved: f.Context, Mem: mem,
			NeverRan: f.NeverRan})
		if len(f.Lua) > 0 {
			c.SetInterp(luajit.Stack(f.Lua))
		}
		out = append(out, c)
	}
	return out
}

// biasIn is the executable's load bias in a process whose mappings are
// maps (exe: the executable's path there): 0 unless it is a PIE.
func (t *Tarantool) biasIn(maps []target.Mapping, exe string) uint64 {
	if !t.pie {
		return 0
	}
	for _, m := range maps {
		if m.Path == exe && m.Offset == 0 {
			return m.Start - t.firstLoad
		}
	}
	return 0
}

// LuaFrames reads the Lua frames of every found fiber that runs Lua,
// from mem. It is meant for after a live pause (the Lua stacks of parked
// fibers do not move while they are parked; reading them in the pause
// would cost a read per frame) or for a core.
func (t *Tarantool) LuaFrames(mem target.Memory, found []TarantoolFiber) {
	if !t.hasLua {
		return
	}
	w := luajit.NewWalker(&t.lua, mem)
	for i := range found {
		if found[i].L != 0 {
			found[i].Lua = w.Frames(found[i].L)
		}
	}
}

// maxLuaStack bounds the Lua stack bytes copied per fiber.
const maxLuaStack = 64 << 10

// luaCopies copies, for each fiber that runs Lua, its lua_State and its
// Lua stack up to the current frame (where the frame links are), in two
// batches: what LuaFrames needs of a fiber that may run again, so that its
// Lua frames are those of the pause. Prototypes, bytecode and strings,
// which a parked fiber's frames only point to, are read later.
func (t *Tarantool) luaCopies(br live.BatchReader, fs []TarantoolFiber) [][]target.Region {
	out := make([][]target.Region, len(fs))
	if !t.hasLua {
		return out
	}
	states := make([]live.Read, len(fs))
	for i, f := range fs {
		if f.L != 0 {
			states[i] = live.Read{Addr: f.L, Buf: make([]byte, max(t.lua.LBase, t.lua.LStack)+8)}
		}
	}
	br.ReadBatch(states)
	stacks := make([]live.Read, len(fs))
	le := binary.LittleEndian
	for i, st := range states {
		if st.N != len(st.Buf) || st.N == 0 {
			continue
		}
		base := le.Uint64(st.Buf[t.lua.LBase:])
		bot := uint64(le.Uint32(st.Buf[t.lua.LStack:]))
		if base > bot && base-bot <= maxLuaStack {
			stacks[i] = live.Read{Addr: bot, Buf: make([]byte, base-bot)}
		}
	}
	br.ReadBatch(stacks)
	for i := range fs {
		for _, rd := range []live.Read{states[i], stacks[i]} {
			if rd.N > 0 {
				out[i] = append(out[i], target.Region{Addr: rd.Addr, Data: rd.Buf[:rd.N]})
			}
		}
	}
	return out
}

// fiberFields reads what copying a fiber needs from its bytes: its
// context's address and saved SP, its switch count, its stack's top and
// its lua_State.
func (t *Tarantool) fiberFields(f uint64, fbuf []byte) TarantoolFiber {
	le := binary.LittleEndian
	tf := TarantoolFiber{Context: f + t.fCtx, SP: le.Uint64(fbuf[t.fCtx:]), csw: le.Uint32(fbuf[t.fCsw:])}
	if t.fStackSize != 0 {
		if lo := le.Uint64(fbuf[t.fStack:]); lo != 0 {
			tf.StackHi = lo + le.Uint64(fbuf[t.fStackSize:])
		}
	}
	if t.hasLua && t.luaL+8 <= uint64(len(fbuf)) {
		tf.L = le.Uint64(fbuf[t.luaL:])
	}
	return tf
}
