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
	fiber, cord := structType(d, "fiber"), structType(d, "cord")
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

// structType finds the definition of struct name among the compile units'
// top-level types.
func structType(d *dwarf.Data, name string) *dwarf.StructType {
	r := d.Reader()
	for {
		e, err := r.Next()
		if err != nil || e == nil {
			return nil
		}
		if e.Tag == dwarf.TagCompileUnit {
			continue
		}
		if e.Tag == dwarf.TagStructType && e.Val(dwarf.AttrDeclaration) == nil {
			if n, _ := e.Val(dwarf.AttrName).(string); n == name {
				if t, err := d.Type(e.Offset); err == nil {
					if st, ok := t.(*dwarf.StructType); ok && !st.Incomplete {
						return st
					}
				}
			}
		}
		if e.Children {
			r.SkipChildren()
		}
	}
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
	// StackHi is the top of the fiber's stack (it grows down from
	// there), 0 when unknown (the scheduler fiber runs on the thread's).
	StackHi uint64
}

// Find lists the inactive fibers of every cord, reading mem: inside a live
// capture's pause (live.Options.During), the live.Reader; for a core, its
// memory. bias is the executable's load bias (0 unless it is a PIE);
// threads are the process's threads with their thread pointers. The
// running fiber of each cord is left out: its stack is the thread's own.
func (t *Tarantool) Find(mem target.Memory, bias uint64, threads []live.StoppedThread) ([]TarantoolFiber, error) {
	byTP := map[uint64]int{}
	cords := []uint64{t.mainCord + bias}
	seen := map[uint64]bool{t.mainCord + bias: true}
	for _, th := range threads {
		if th.TP == 0 {
			continue
		}
		byTP[th.TP] = th.TID
		if !t.hasTLS || t.tlsOffset == 0 {
			continue
		}
		p, err := readU64(mem, th.TP-t.tlsOffset+t.cordPtr)
		if err == nil && p != 0 && !seen[p] {
			seen[p] = true
			cords = append(cords, p)
		}
	}
	var out []TarantoolFiber
	cbuf := make([]byte, t.cordSize)
	for _, cord := range cords {
		if err := mem.ReadMemory(cord, cbuf); err != nil {
			return out, fmt.Errorf("Tarantool cord at %#x: %w", cord, err)
		}
		le := binary.LittleEndian
		running := le.Uint64(cbuf[t.cFiber:])
		tid := byTP[le.Uint64(cbuf[t.cID:])]
		fibers := []uint64{cord + t.cSched}
		head := cord + t.cAlive
		node := le.Uint64(cbuf[t.cAlive+8:]) // rlist: prev, next
		// A list that loops without passing its head again (damaged
		// memory) is caught by Brent's cycle detection: mark is
		// re-anchored at every power of two steps.
		mark, power := uint64(0), 1
		for n := 0; node != head; n++ {
			if node == 0 || node == mark || n >= maxFibersPerCord {
				return out, fmt.Errorf("Tarantool cord at %#x: its fiber list is broken after %d fibers", cord, n)
			}
			if n+1 == power {
				mark, power = node, power*2
			}
			fibers = append(fibers, node-t.fLink)
			next, err := readU64(mem, node+8)
			if err != nil {
				return out, fmt.Errorf("Tarantool cord at %#x: fiber list: %w", cord, err)
			}
			node = next
		}
		fbuf := make([]byte, t.fiberSize)
		for _, f := range fibers {
			if f == running {
				continue
			}
			if err := mem.ReadMemory(f, fbuf); err != nil {
				continue
			}
			tf := TarantoolFiber{TID: tid, ID: le.Uint32(fbuf[t.fFid:]), Context: f + t.fCtx,
				NeverRan: le.Uint32(fbuf[t.fCsw:]) == 0}
			tf.Name = t.fiberName(mem, f, fbuf)
			if t.fStackSize != 0 {
				if lo := le.Uint64(fbuf[t.fStack:]); lo != 0 {
					tf.StackHi = lo + le.Uint64(fbuf[t.fStackSize:])
				}
			}
			out = append(out, tf)
		}
	}
	return out, nil
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
		b = make([]byte, 64)
		if p >= f && p+64 <= f+t.fiberSize {
			copy(b, fbuf[p-f:])
		} else if mem.ReadMemory(p, b) != nil {
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
		c := target.Context{Kind: target.KindFiber, Runtime: "tarantool", TID: f.TID, ID: int64(f.ID), HasID: true,
			Name: f.Name, Saved: f.Context, Mem: mem, NeverRan: f.NeverRan}
		r, err := Read(tg, mem, Spec{Kind: Coro, Addr: f.Context})
		if err != nil {
			c.Err = err
		} else {
			c.Regs = r
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
