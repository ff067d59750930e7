package unwind

import (
	"fmt"

	"github.com/rewindstack/rewind/regs"
)

// FramePointers follows the frame-pointer chain. On amd64 a frame record is
// [saved rbp][return address] at rbp; on arm64 it is [saved x29][saved x30]
// at x29. It needs no unwind information, and that is its weakness: code
// built without frame pointers (the system libc, -fomit-frame-pointer) uses
// the register for data, and the chain skips or stops at such frames. That
// is where flame graphs get their "[unknown]" frames.
type FramePointers struct{}

// Method implements Stepper.
func (FramePointers) Method() Method { return MethodFP }

// Step implements Stepper.
func (FramePointers) Step(c *Cursor) error {
	arch := c.Regs.Arch
	// Without CFI a signal frame is recognised by its trampoline's code;
	// the frame-pointer chain alone would skip the interrupted function.
	if isSignalTrampoline(c) {
		c.Method = MethodSignal
		return restoreSignalFrame(c)
	}
	fp, ok := c.get(arch.FP())
	if !ok {
		return fmt.Errorf("%w: frame pointer", ErrRegister)
	}
	if fp == 0 {
		return ErrChainEnd
	}
	if fp&7 != 0 {
		return fmt.Errorf("%w: %#x is misaligned", ErrBadFP, fp)
	}
	if sp, ok := c.get(arch.SP()); ok && fp < sp {
		return fmt.Errorf("%w: %#x is below the stack pointer %#x", ErrBadFP, fp, sp)
	}
	savedFP, ra, err := c.mem.pair(fp)
	if err != nil {
		return err
	}
	if ra == 0 {
		return ErrChainEnd
	}
	ra = stripPAC(arch, ra)
	if !c.mayReturnTo(ra) {
		return fmt.Errorf("%w: return address %#x at %#x is not in executable memory", ErrBadFP, ra, fp+8)
	}
	*c.Caller = regs.New(arch)
	c.Caller.Set(arch.PC(), ra)
	c.Caller.Set(arch.SP(), fp+16)
	c.Caller.Set(arch.FP(), savedFP)
	return nil
}

// mayReturnTo reports whether ra can be a return address: it lies in an
// executable mapping, or the address space lists no mappings at all (a
// source that knows none). A frame pointer that code without frame
// pointers used for data yields a "return address" anywhere; taking it
// would add a frame no symbolizer can name and go on from garbage.
func (c *Cursor) mayReturnTo(ra uint64) bool {
	if c.space == nil || len(c.space.Mappings()) == 0 {
		return true
	}
	m := c.space.Find(ra - 1)
	return m != nil && m.Executable()
}

// stripPAC removes arm64 pointer-authentication bits from a return address
// (user space addresses use at most 48 bits on Linux).
func stripPAC(arch regs.Arch, ra uint64) uint64 {
	if arch == regs.ARM64 {
		return ra & (1<<48 - 1)
	}
	return ra
}
