package unwind

import (
	"fmt"

	"github.com/rewindstack/rewind/internal/goruntime"
	"github.com/rewindstack/rewind/regs"
)

// GoPCLN unwinds Go code by the pcln table every Go executable carries for
// the runtime's own traceback (goruntime.Table): for a PC in a Go
// function, the pcsp table gives how far the stack pointer lies below its
// value at the function's entry, which is all Go's calling convention
// leaves to know (the runtime's unwinder.next and funcspdelta do the same).
// A binary built with -ldflags='-s -w' has no DWARF CFI and Go writes no
// .eh_frame, so without it only frame pointers walk such a binary, and
// they skip the caller of every function that has no frame yet (an
// assembly leaf such as runtime.futex hides runtime.futexsleep).
//
// On amd64 the call pushed the return address: CFA = SP + delta + 8, the
// return address at CFA-8. On arm64 the return address is in the link
// register until the prologue stores it at 0(SP) (delta > 0): CFA = SP +
// delta, and the return address is LR for an exact frame whose delta is 0
// (a leaf, or a function at its entry) and 0(SP) otherwise, as the runtime
// reads it.
//
// The caller's frame pointer is the one saved in this frame's frame record
// when the frame pointer points at that record (Go saves it at CFA-16 on
// amd64, at SP-8 on arm64), and the frame pointer unchanged otherwise: a
// function before its prologue's frame record, after its epilogue, or
// without a frame has not touched it. Go's .debug_frame gives the same
// CFA and return address (the linker writes it from the same pcsp table)
// but says nothing of the frame pointer.
//
// Functions the table flags SPWRITE (they switch stacks: gogo, mcall,
// asmcgocall, ...) are left to the next stepper, but at their first
// instruction, as the runtime's traceback does; the walk ends before the
// top frames (runtime.goexit, runtime.mstart) by their names, which the
// table provides in a stripped binary too (see goruntime.RootRanges).
type GoPCLN struct{}

// Method implements Stepper.
func (GoPCLN) Method() Method { return MethodGoPCLN }

// Step implements Stepper.
func (GoPCLN) Step(c *Cursor) error {
	if c.Map == nil || c.Map.Module == nil {
		return ErrNoInfo
	}
	gt := goruntime.TableOf(c.Map.Module)
	if gt == nil {
		return ErrNoInfo
	}
	v := c.PC - c.Map.Bias
	f, ok := gt.Func(v)
	if !ok {
		return ErrNoInfo
	}
	if f.Flag&goruntime.FlagSPWrite != 0 && !(c.Exact && v == f.Entry) {
		return ErrNoInfo
	}
	delta, err := gt.SPDelta(&f, v)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoInfo, err)
	}
	arch := c.Regs.Arch
	sp, ok := c.get(arch.SP())
	if !ok {
		return fmt.Errorf("%w: %s", ErrRegister, arch.RegName(arch.SP()))
	}
	var cfa, ra uint64
	switch arch {
	case regs.AMD64:
		cfa = sp + uint64(delta) + 8
		if ra, err = c.Read(cfa - 8); err != nil {
			return err
		}
	case regs.ARM64:
		cfa = sp + uint64(delta)
		if delta == 0 && c.Exact {
			if ra, ok = c.get(arch.RA()); !ok {
				return fmt.Errorf("%w: %s", ErrRegister, arch.RegName(arch.RA()))
			}
		} else if ra, err = c.Read(sp); err != nil {
			return err
		}
		ra = stripPAC(arch, ra)
	default:
		return ErrNoInfo
	}
	if ra == 0 {
		return ErrChainEnd
	}
	*c.Caller = regs.New(arch)
	c.Caller.Set(arch.PC(), ra)
	c.Caller.Set(arch.SP(), cfa)
	if fp, ok := c.get(arch.FP()); ok {
		// Where this frame's record would be: its frame pointer points
		// there once the prologue has made it.
		record := cfa - 16
		if arch == regs.ARM64 {
			record = sp - 8
		}
		if delta > 0 && fp == record {
			if fp, err = c.Read(record); err != nil {
				return err
			}
		}
		c.Caller.Set(arch.FP(), fp)
	}
	return nil
}
