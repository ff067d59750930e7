package fibers

import (
	"encoding/binary"

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
	if tps := r.ThreadPointers(); len(tps) > 0 {
		first = append(first, live.Read{Addr: tps[0] + 0x30, Buf: make([]byte, 8)})
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
	if tps := r.ThreadPointers(); len(tps) > 0 && first[0].N == 8 {
		guard, haveGuard = binary.LittleEndian.Uint64(first[0].Buf), true
		first = first[1:]
	} else if len(r.ThreadPointers()) > 0 {
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
