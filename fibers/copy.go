package fibers

import (
	"encoding/binary"
	"fmt"
	"os"

	"github.com/rewindstack/rewind/internal/procmaps"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/target"
)

// DefaultStackCopy is how much of a fiber's stack a Copier copies, from
// its saved stack pointer upward: the used part of a parked fiber's stack
// is usually a few kilobytes; a deeper one is read beyond the copy from the
// process (live) or the core.
const DefaultStackCopy = 64 << 10

// directSize is what is read of a context stored in place (ucontext_t,
// jmp_buf) before its layout is known: more than any of their records.
const directSize = 512

// A Copier copies the contexts Specs name, and the used part of each
// fiber's stack, while a live target is stopped: pass its During as
// live.Options.During, then read the contexts with Explicit over its
// Memory. Fibers are then unwound from the same instant as the threads,
// not from a process that has run on.
type Copier struct {
	Specs []Spec
	Arch  regs.Arch
	// StackCopy bounds the bytes copied per fiber stack (0:
	// DefaultStackCopy).
	StackCopy int
	// Tarantool, when set, finds the process's Tarantool fibers in the
	// pause (Bias: its executable's load bias); Found and FindErr are
	// what it found.
	Tarantool *Tarantool
	Bias      uint64
	Found     []TarantoolFiber
	FindErr   error

	regions []target.Region
}

// During does the copying; see live.Options.During. Three batches: the
// pointer guard and every context (or the pointer to it); the records that
// pointers lead to, with the stack above them; the stacks of contexts
// stored in place.
func (c *Copier) During(r *live.Reader) {
	size := c.StackCopy
	if size <= 0 {
		size = DefaultStackCopy
	}
	var first []live.Read
	tp := uint64(0)
	for _, th := range r.Threads() {
		if th.TP != 0 {
			tp = th.TP
			break
		}
	}
	if tp != 0 {
		first = append(first, live.Read{Addr: tp + 0x30, Buf: make([]byte, 8)})
	}
	for _, sp := range c.Specs {
		switch {
		case sp.Kind == Regs:
			first = append(first, live.Read{Addr: sp.SP - min(sp.SP, 128), Buf: make([]byte, size+128)})
		case layouts[c.Arch][sp.Kind].indirect || sp.Kind == FContext:
			first = append(first, live.Read{Addr: sp.Addr, Buf: make([]byte, 8)})
		default:
			first = append(first, live.Read{Addr: sp.Addr, Buf: make([]byte, directSize)})
		}
	}
	r.ReadBatch(first)
	c.keep(first)
	guard, haveGuard := uint64(0), false
	if tp != 0 {
		guard, haveGuard = binary.LittleEndian.Uint64(first[0].Buf), first[0].N == 8
		first = first[1:]
	}
	var second []live.Read
	for i, sp := range c.Specs {
		rd := &first[i]
		var lo uint64
		switch {
		case sp.Kind == Regs:
			continue
		case rd.N == 8 && len(rd.Buf) == 8:
			lo = binary.LittleEndian.Uint64(rd.Buf) // the record, then the stack above it
		case rd.N == directSize:
			sp, ok := directSP(c.Arch, sp.Kind, rd.Buf, guard, haveGuard)
			if !ok {
				continue
			}
			lo = sp - min(sp, 128)
		default:
			continue
		}
		if lo != 0 {
			second = append(second, live.Read{Addr: lo, Buf: make([]byte, size)})
		}
	}
	r.ReadBatch(second)
	c.keep(second)
	if c.Tarantool != nil {
		c.Found, c.FindErr = c.Tarantool.Find(r, c.Bias, r.Threads())
		c.copyCoro(r, size)
	}
}

// copyCoro copies the found fibers' libcoro contexts and, from each saved
// stack pointer, the used part of its stack: two batches.
func (c *Copier) copyCoro(r *live.Reader, size int) {
	ptrs := make([]live.Read, len(c.Found))
	for i, f := range c.Found {
		ptrs[i] = live.Read{Addr: f.Context, Buf: make([]byte, 8)}
	}
	r.ReadBatch(ptrs)
	c.keep(ptrs)
	var stacks []live.Read
	for i, p := range ptrs {
		if p.N != 8 {
			continue
		}
		sp := binary.LittleEndian.Uint64(p.Buf)
		if sp == 0 {
			continue
		}
		n := uint64(size)
		if hi := c.Found[i].StackHi; hi > sp && hi-sp < n {
			n = hi - sp // only the used part
		}
		stacks = append(stacks, live.Read{Addr: sp, Buf: make([]byte, n)})
	}
	r.ReadBatch(stacks)
	c.keep(stacks)
}

// directSP is the saved stack pointer of a context stored in place.
func directSP(arch regs.Arch, kind string, rec []byte, guard uint64, haveGuard bool) (uint64, bool) {
	l, ok := layouts[arch][kind]
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

// Memory returns the copies over next (the snapshot's memory): reads they
// do not cover go to next.
func (c *Copier) Memory(next target.Memory) target.Memory {
	return &target.Snapshot{Regions: c.regions, Next: next}
}

// NewCopier prepares the copying of a live process's fibers: the explicit
// contexts specs name and, with auto, those of the fiber runtimes rewind
// recognizes (Tarantool), whose layout it reads from the executable now,
// before anything stops. Problems that leave fibers out (an unrecognized
// runtime, a layout without debug information) go to warn.
func NewCopier(pid int, specs []Spec, auto bool, warn func(string)) *Copier {
	c := &Copier{Specs: specs, Arch: live.HostArch}
	if !auto {
		return c
	}
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
	}
	return c
}

// Contexts returns the fiber contexts the copies hold, for tg (the
// snapshot's target): the explicit ones, then the runtime's, each over
// the copies; a runtime's problem goes to warn.
func (c *Copier) Contexts(tg *target.Target, warn func(string)) []target.Context {
	mem := c.Memory(tg.Mem)
	out := Explicit(tg, c.Specs, mem)
	if c.FindErr != nil {
		warn(fmt.Sprintf("fibers: %v", c.FindErr))
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
