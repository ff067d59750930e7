package unwind

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/rewindstack/rewind/internal/goruntime"
	"github.com/rewindstack/rewind/regs"
)

// Crossing from g0 to the goroutine, as Go's own traceback does
// (unwinder.resolveInternal with unwindJumpStack, which the runtime's CPU
// profiler uses): on a thread's system stack (g0), when the thread's m
// still runs the goroutine that switched (m.curg, with curg.m this m),
//
//   - from runtime.morestack the walk continues at the goroutine's saved
//     registers, curg.sched (pc, sp, bp; arm64's lr): morestack stored
//     them, cleared the frame pointer and called runtime.newstack on g0,
//     which resumes the goroutine there. Nothing on g0 leads back to it.
//   - from runtime.systemstack it continues on the goroutine's stack at
//     curg.sched.sp and bp, systemstack's own frame there, as
//     gosave_systemstack_switch saved them: the steppers find
//     systemstack's caller from it, on any architecture, whether or not
//     a frame pointer the function called on g0 saved leads there.
//
// The g the thread runs comes from its registers where the walk began: the
// Go ABI keeps it in r14 (amd64) and x28 (arm64) in Go code, the runtime's
// assembly too (amd64's TLS slot, which the BPF walk reads, holds the same
// g). Whatever the register holds is taken only if it is this thread's g0 or
// its current goroutine (g.m.g0 or g.m.curg is it). The runtime's offsets
// come from the binary (internal/goruntime, as goroutine dumps read them).
//
// Where the g is not in the memory being unwound (a perf sample copies
// only the stack), a walk at morestack ends with EndGoSwitch; one at
// systemstack goes on as goSwitch does without it (its frame pointer).
// When m.curg is no longer the goroutine (the scheduler descheduled it
// under newstack: gopreempt_m, preemptPark), Go's traceback ends the walk
// at morestack; here it goes on to g0's own frames where they are: morestack
// called newstack at g0.sched.sp, the label mstart1 left for the
// scheduler, so above morestack's frame is mstart0's, returning to
// g0.sched.pc (checked: the morestack frame is at g0.sched.sp, and
// g0.sched.pc returns from a call of mstart1), and the walk ends at the
// thread's runtime.mstart as the scheduler's other stacks do. Where that
// does not hold, it ends at morestack. runtime.mcall stays where a g0
// stack ends.

// gReg is the register the Go ABI keeps the running g in.
func gReg(a regs.Arch) int {
	if a == regs.ARM64 {
		return 28
	}
	return 14 // r14
}

// goSched is a goroutine's saved registers and stack, as read from its g.
type goSched struct {
	pc, sp, bp, lr uint64
	lo, hi         uint64 // its stack
}

// errGoNoG: the walk has no g to cross with (no g register, a value that
// is not a g of this thread, no runtime layout); errGoGone: the thread
// no longer runs the goroutine that switched.
var (
	errGoNoG  = errors.New("no g of the thread")
	errGoGone = errors.New("the thread's m no longer runs the goroutine")
)

// goCurG reads, from the g register of the walk's first frame, the
// goroutine the thread's m runs (m.curg) and its saved registers. It
// returns errGoNoG, errGoGone (with the m's g0), or a memory error
// (ErrGoSwitch) where the g is not in the memory.
func goCurG(c *Cursor) (goSched, uint64, error) {
	var s goSched
	g := c.g
	if !c.hasG || g == 0 || g&7 != 0 {
		return s, 0, errGoNoG
	}
	// The g's first word (its stack's low bound) before the layout: a
	// perf sample's memory holds no g, and the layout is read from the
	// binary only for a walk that can use it.
	if _, err := c.Read(g); err != nil {
		return s, 0, fmt.Errorf("%w: the thread's g at %#x is not in the memory", ErrGoSwitch, g)
	}
	rt := goruntime.CrossingOf(c.Map.Module)
	if rt == nil {
		return s, 0, errGoNoG
	}
	read := func(base uint64, off int, v *uint64) bool {
		x, err := c.Read(base + uint64(off))
		*v = x
		return err == nil
	}
	var m, g0, curg, cm uint64
	if !read(g, rt.Layout.G.M, &m) || m == 0 || m&7 != 0 || !read(m, rt.Layout.M.G0, &g0) || !read(m, rt.Layout.M.CurG, &curg) {
		return s, 0, errGoNoG
	}
	if g != g0 && g != curg {
		return s, 0, errGoNoG
	}
	if curg == 0 || curg == g0 || !read(curg, rt.Layout.G.M, &cm) || cm != m {
		return s, g0, errGoGone
	}
	if !read(curg, rt.Layout.G.SchedPC, &s.pc) || !read(curg, rt.Layout.G.SchedSP, &s.sp) || !read(curg, rt.Layout.G.SchedBP, &s.bp) ||
		!read(curg, rt.Layout.G.StackLo, &s.lo) || !read(curg, rt.Layout.G.StackHi, &s.hi) {
		return s, g0, fmt.Errorf("%w: the goroutine's g at %#x is not in the memory", ErrGoSwitch, curg)
	}
	if c.Regs.Arch == regs.ARM64 && !read(curg, rt.Layout.G.SchedLR, &s.lr) {
		return s, g0, fmt.Errorf("%w: the goroutine's g at %#x is not in the memory", ErrGoSwitch, curg)
	}
	return s, g0, nil
}

// goMorestackJump continues a walk at runtime.morestack on g0 at the
// goroutine's saved registers. It returns ErrNoInfo where the frame is
// not on g0 or the walk has no g to cross with (goSwitch then goes on as
// without a crossing).
func goMorestackJump(c *Cursor) error {
	s, g0, err := goCurG(c)
	switch {
	case errors.Is(err, errGoNoG):
		return ErrNoInfo
	case errors.Is(err, errGoGone):
		if goG0Label(c, g0) {
			return nil
		}
		return fmt.Errorf("%w: runtime.morestack: the goroutine that grew its stack is no longer this thread's", ErrChainEnd)
	case err != nil:
		return err
	}
	if c.Exact {
		// Stopped in morestack itself: before its move to g0 the frame
		// is on the goroutine stack, which its unwind information
		// describes.
		if sp, ok := c.get(c.Regs.Arch.SP()); !ok || sp >= s.lo && sp < s.hi {
			return ErrNoInfo
		}
	}
	if s.sp < s.lo || s.sp >= s.hi || !goMorestackReturn(c, s.pc) {
		return fmt.Errorf("%w: runtime.morestack: the goroutine's saved registers (pc %#x, sp %#x) are not morestack's", ErrGoSwitch, s.pc, s.sp)
	}
	setCaller(c, s.pc, s.sp, s.bp)
	if c.Regs.Arch == regs.ARM64 {
		// The function that called morestack from its prologue has
		// not saved its return address yet: morestack kept it (R3).
		c.Caller.Set(regs.ARM64X30, s.lr)
	}
	c.Method, c.stackSwitch, c.goJumped = MethodGoSwitch, true, true
	return nil
}

// goG0Label continues a walk at runtime.morestack on g0 whose goroutine
// the scheduler descheduled at g0's own frames: morestack's frame is at
// g0.sched.sp, and above it mstart0's, to which g0.sched.pc returns from
// its call of mstart1. It reports whether it did.
func goG0Label(c *Cursor, g0 uint64) bool {
	rt := goruntime.CrossingOf(c.Map.Module)
	sp, ok := c.get(c.Regs.Arch.SP())
	if rt == nil || rt.Mstart1[0] == 0 || !ok || g0 == 0 {
		return false
	}
	lpc, err1 := c.Read(g0 + uint64(rt.Layout.G.SchedPC))
	lsp, err2 := c.Read(g0 + uint64(rt.Layout.G.SchedSP))
	if err1 != nil || err2 != nil || lsp != sp || !goReturnFrom(c, lpc, rt.Mstart1[0]) {
		return false
	}
	arch := c.Regs.Arch
	*c.Caller = regs.New(arch)
	c.Caller.Set(arch.PC(), lpc)
	c.Caller.Set(arch.SP(), lsp)
	// (mstart1 saved no frame pointer in the label: mstart0's is not
	// known, and its unwind information does not need it.)
	c.Method, c.stackSwitch, c.goJumped = MethodGoSwitch, true, true
	return true
}

// goMorestackReturn reports whether pc returns from a call of
// runtime.morestack or runtime.morestack_noctxt (the call every Go
// function's stack check makes), as curg.sched.pc saved by morestack does.
func goMorestackReturn(c *Cursor, pc uint64) bool {
	rt := goruntime.CrossingOf(c.Map.Module)
	return rt != nil && rt.Morestack[0] != 0 && (goReturnFrom(c, pc, rt.Morestack[0]) || rt.MorestackNoctxt[0] != 0 && goReturnFrom(c, pc, rt.MorestackNoctxt[0]))
}

// goReturnFrom reports whether pc returns from a direct call of the
// function at file address fn of the module the walk's frame is in.
func goReturnFrom(c *Cursor, pc, fn uint64) bool {
	m := c.space.Find(pc - 1)
	if m == nil || m.Module == nil || m.Module.File == nil || m.Module != c.Map.Module {
		return false
	}
	var target uint64
	switch c.Regs.Arch {
	case regs.AMD64:
		var code [5]byte
		if m.Module.File.ReadVaddr(pc-5-m.Bias, code[:]) != nil || code[0] != 0xe8 {
			return false
		}
		target = pc + uint64(int64(int32(binary.LittleEndian.Uint32(code[1:])))) - m.Bias
	case regs.ARM64:
		var code [4]byte
		insn := uint32(0)
		if m.Module.File.ReadVaddr(pc-4-m.Bias, code[:]) == nil {
			insn = binary.LittleEndian.Uint32(code[:])
		}
		if insn>>26 != 0x25 { // BL imm26
			return false
		}
		target = pc - 4 + uint64(int64(int32(insn<<6)>>6)*4) - m.Bias
	default:
		return false
	}
	return target == fn
}

// goSystemstackJump moves a walk at runtime.systemstack on g0 (a return
// address into it: the function it called on g0 runs) to the goroutine's
// stack, as Go's traceback does: systemstack's frame there, at
// curg.sched.sp (and bp), where gosave_systemstack_switch saved them. The
// steppers then find systemstack's caller from that frame. bp is the
// goroutine's frame pointer as the switch kept it (saved by the callee on
// g0), 0 when unknown: a curg.sched whose bp is not that one was saved by
// another switch (read after the thread went on). It reports whether it
// moved the walk.
func goSystemstackJump(c *Cursor, bp uint64) bool {
	s, _, err := goCurG(c)
	if err != nil {
		return false
	}
	rt := goruntime.CrossingOf(c.Map.Module)
	// gosave_systemstack_switch points sched.pc into systemstack_switch
	// (the goroutine's stack scans see that function), and systemstack
	// zeroes sched.sp and sched.bp when it switches back.
	if s.sp < s.lo || s.sp >= s.hi || bp != 0 && s.bp != bp || rt == nil || rt.SystemstackSwitch[1] == 0 {
		return false
	}
	if v := s.pc - c.Map.Bias; v < rt.SystemstackSwitch[0] || v >= rt.SystemstackSwitch[1] {
		return false
	}
	c.Regs.Set(c.Regs.Arch.SP(), s.sp)
	c.Regs.Set(c.Regs.Arch.FP(), s.bp)
	c.stackSwitch, c.goJumped = true, true
	return true
}
