package unwind

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/rewindstack/rewind/internal/goruntime"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwindtable"
)

// Go stack switches. A Go thread runs runtime code on its own system stack
// (g0) and user code on goroutine stacks, and three assembly functions move
// between them: runtime.systemstack (calls a function on g0 and returns),
// runtime.mcall (switches to g0 for good, leaving the goroutine's registers
// in its g.sched) and runtime.morestack (switches to g0 to grow the
// goroutine's stack). Their unwind information describes only the stack
// they were entered on, so a CFI or SFrame step from them reads whatever
// lies above g0's saved stack pointer: the garbage frames and
// bad-frame-pointer ends of issue 13. The runtime's own unwinder
// special-cases them (traceback.go, unwinder.next); goSwitch does the same
// with what a snapshot holds:
//
//   - systemstack: given the thread's g (gojump.go), the walk goes on at
//     systemstack's frame on the goroutine's stack, where
//     gosave_systemstack_switch saved its SP and BP in curg.sched, as Go's
//     traceback does. Without it: the calling goroutine's frame pointer
//     survives the switch (the callee saved it at the top of its frame on
//     g0). Its frame record leads to the goroutine's frames; a return
//     address into systemstack's direct caller just below it is found by
//     its call instruction.
//   - mcall: it leaves the goroutine for good (parked, exiting,
//     preempted) and clears the frame pointer; the goroutine may already
//     run on another thread. The walk ends there cleanly, as the runtime's
//     traceback of g0 does.
//   - nanotime1, walltime, time.now: they move to g0's stack around a
//     vDSO call after saving the frame pointer on the goroutine stack;
//     the frame pointer leads back to it.
//   - gogo: stopped between loading a goroutine's SP and BP and jumping
//     to its PC, it is followed by the frame pointer too.
//   - sigtramp: the Go signal handler's stack (gsignal) begins there;
//     the walk goes on through the kernel's signal frame (the restorer,
//     runtime.sigreturn__sigaction, recognised by its code) into the
//     interrupted goroutine, on its own stack.
//   - morestack: the goroutine's registers are in its g (curg.sched),
//     which nothing on g0 points to: given the thread's g, the walk goes
//     on there, as Go's traceback does (gojump.go); without it, g0's own
//     frame-pointer chain, which morestack cleared, ends it there.
//
// When the other stack, or the g, is not in the memory being unwound (a
// perf sample copies only the stack the thread was on), the walk ends
// with EndGoSwitch, so that a caller holding the kernel's frame-pointer
// walk can continue from it.

// ErrGoSwitch: the walk reached a Go stack switch whose other side is not
// readable in the memory being unwound.
var ErrGoSwitch = errors.New("Go stack switch")

// goSwitchRange is one switching function's extent in a module.
type goSwitchRange struct {
	lo, hi uint64
	kind   goruntime.SwitchKind
	// child, for runtime.clone, is where the code only the new thread
	// runs begins (0 when not found): there it is on its new stack, and
	// clone is its outermost frame.
	child uint64
}

// goSwitchRanges finds the extents of a Go module's switching functions
// in its symbol table, or else in its pcln table; the walk keeps them in
// its modInfo.
func goSwitchRanges(m *target.Module) []goSwitchRange {
	if m.File == nil || !m.File.Go {
		return nil
	}
	var rs []goSwitchRange
	for _, s := range goruntime.Switches {
		for _, name := range s.Names() {
			if lo, hi, ok := m.File.SymbolExtent(name); ok && hi > lo {
				rs = append(rs, goSwitchRange{lo: lo, hi: hi, kind: s.Kind})
			}
		}
	}
	if len(rs) > 0 {
		return cloneChildren(m, rs)
	}
	// A stripped binary: the pcln table names the functions too
	// (assembly ones without ".abi0").
	gt := goruntime.TableOf(m)
	if gt == nil {
		return nil
	}
	names := make([]string, len(goruntime.Switches))
	for i, s := range goruntime.Switches {
		names[i] = s.Name
	}
	ext := gt.Extents(names)
	for _, s := range goruntime.Switches {
		if e, ok := ext[s.Name]; ok && e[1] > e[0] {
			rs = append(rs, goSwitchRange{lo: e[0], hi: e[1], kind: s.Kind})
		}
	}
	return cloneChildren(m, rs)
}

// cloneChildren finds, in runtime.clone's code, where the child's part
// begins. After the clone system call both threads test its result:
//
//	SYSCALL; CMPQ AX, $0; JEQ child; (the parent returns)
//
// and the child, at the jump's target, runs on the stack the kernel gave
// it, where nothing lies above its frame but whatever the memory held
// before. The sequence is amd64's (sys_linux_amd64.s, as in Go 1.26):
// where it is not found, only a return address into clone ends the walk
// there. On arm64 goSwitch leaves every frame to the steppers.
func cloneChildren(m *target.Module, rs []goSwitchRange) []goSwitchRange {
	if m.File.Arch != regs.AMD64 {
		return rs
	}
	pattern := []byte{0x0f, 0x05, 0x48, 0x83, 0xf8, 0x00, 0x74}
	for i := range rs {
		r := &rs[i]
		if r.kind != goruntime.Clone || r.hi-r.lo > 4096 {
			continue
		}
		code := make([]byte, r.hi-r.lo)
		if m.File.ReadVaddr(r.lo, code) != nil {
			continue
		}
		if j := bytes.Index(code, pattern); j >= 0 && j+len(pattern) < len(code) {
			next := uint64(j + len(pattern) + 1)
			r.child = r.lo + next + uint64(int64(int8(code[j+len(pattern)])))
		}
	}
	return rs
}

// goSwitchAt returns the switch kind of the function containing the
// cursor's PC and that function's runtime start address.
func goSwitchAt(c *Cursor) (goruntime.SwitchKind, uint64) {
	if c.info == nil || len(c.info.goSwitch) == 0 {
		return goruntime.NoSwitch, 0
	}
	m := c.Map
	v := c.PC - m.Bias
	for _, r := range c.info.goSwitch {
		if v >= r.lo && v < r.hi {
			return r.kind, r.lo + m.Bias
		}
	}
	return goruntime.NoSwitch, 0
}

// goSwitch handles a frame in one of the switching functions; it returns
// ErrNoInfo for every other frame. The walk calls it before the steppers
// for frames in modules that have such functions (c.info.goSwitch).
func goSwitch(c *Cursor) error {
	kind, start := goSwitchAt(c)
	c.goKind = kind
	switch {
	case kind == goruntime.Morestack:
		// On g0: on to the goroutine's saved registers (gojump.go).
		if err := goMorestackJump(c); err != ErrNoInfo {
			return err
		}
	case kind == goruntime.Systemstack && !c.Exact && c.Regs.Arch != regs.AMD64:
		// (amd64's below, once the frame is known to be on g0.) The
		// steppers go on from systemstack's frame on the goroutine's
		// stack.
		goSystemstackJump(c, 0)
	}
	if c.Regs.Arch != regs.AMD64 {
		// arm64 keeps the return address in a register and saves it
		// elsewhere: left to the steppers for now.
		return ErrNoInfo
	}
	if !c.Exact && c.Map != nil {
		// A return address at the start of the runtime's signal
		// restorer: the kernel pushed it for the handler, and the
		// lookup address (one before) falls in the function before.
		// Its code may not be in the memory (a perf sample), so it is
		// known by its symbol.
		raw := c.PC + 1 - c.Map.Bias
		for _, r := range c.info.goSwitch {
			if r.kind == goruntime.Sigreturn && raw == r.lo {
				c.Method = MethodSignal
				return restoreSignalFrame(c)
			}
		}
	}
	if kind == goruntime.Sigreturn {
		if !c.Exact {
			return ErrNoInfo // a return into it: isSignalTrampoline's case
		}
		// Stopped inside the restorer: the stack pointer is still at
		// the signal frame's ucontext.
		c.Method = MethodSignal
		return restoreSignalFrame(c)
	}
	if kind == goruntime.Clone {
		if c.Exact && newGoThread(c) {
			return fmt.Errorf("%w: runtime.clone: a new thread, at its first instruction", ErrChainEnd)
		}
		// Only the child calls anything from clone: a return address
		// into it is the new thread's outermost frame, as is a PC in the
		// child's part.
		if !c.Exact || cloneChildAt(c) {
			return fmt.Errorf("%w: runtime.clone: a new thread's first frame", ErrChainEnd)
		}
		return ErrNoInfo // the parent's frame
	}
	if kind == goruntime.FPSwitch {
		fp, ok := c.get(c.Regs.Arch.FP())
		if !ok {
			return ErrNoInfo
		}
		c.Method = MethodFP
		return goFrameRecord(c, fp, true)
	}
	if kind == goruntime.NoSwitch {
		return ErrNoInfo
	}
	if c.Exact {
		// Frame 0 inside a switch itself may be on either stack.
		// systemstack and mcall leave the goroutine's frame pointer
		// in place on both (until mcall clears it): its record leads
		// to the goroutine's frames, as the kernel's walk goes.
		fp, ok := c.get(c.Regs.Arch.FP())
		if kind == goruntime.Morestack || !ok {
			return ErrNoInfo
		}
		c.Method = MethodFP
		return goFrameRecord(c, fp, true)
	}
	if kind != goruntime.Morestack {
		// Before the switch, systemstack and mcall make only direct
		// calls (gosave_systemstack_switch); they call the function on
		// g0 indirectly. A direct call here means the frame is still
		// on the goroutine stack, which the steppers describe.
		if ra, _ := c.get(c.Regs.Arch.PC()); callsAt(c, ra, 0) {
			return ErrNoInfo
		}
	}
	sp, ok := c.get(c.Regs.Arch.SP())
	if !ok {
		return ErrNoInfo
	}
	// The function the switch called saved the frame pointer it was
	// entered with just below its return address: the goroutine's (for
	// systemstack and mcall) or g0's (for morestack). A callee stopped at
	// its entry (its stack pointer just below the return address) has not
	// saved it yet and still holds it in its register; the walk keeps the
	// callee's registers in the caller's slot until a step overwrites
	// them.
	var bp uint64
	var err error
	calleeSP, ok := c.Caller.SP()
	fp, okFP := c.Caller.FP()
	if ok && okFP && calleeSP+8 == sp {
		bp = fp
	} else {
		bp, err = c.Read(sp - 16)
	}
	if err != nil {
		return err
	}
	c.Method = MethodFP
	switch kind {
	case goruntime.Mcall:
		// Go's traceback ends a g0 stack here: mcall cleared the
		// frame pointer, and the goroutine that entered the scheduler
		// is no longer this thread's (parked, exiting, or running
		// elsewhere).
		return fmt.Errorf("%w: runtime.mcall: the scheduler's stack (g0) begins here", ErrChainEnd)
	case goruntime.Systemstack:
		// On to systemstack's frame on the goroutine's stack, at its
		// saved SP (gojump.go), from which the steppers find its
		// caller; without the goroutine's g, through the frame
		// pointer the switch kept.
		if goSystemstackJump(c, bp) {
			return ErrNoInfo
		}
		return goSystemstackStep(c, start, bp)
	}
	// morestack without the thread's g: g0's own chain (morestack
	// cleared the frame pointer).
	return goFrameRecord(c, bp, false)
}

// goSwitchCaller checks the caller a stepper found for a frame in one of
// the switching functions goSwitch left to the steppers (morestack
// stopped in, say): their unwind information describes the stack they
// were entered on, and once they have moved to the other one, it finds
// whatever lies there. A caller outside executable memory is such a
// word, not a return address: the walk ends at the switch.
func goSwitchCaller(c *Cursor) error {
	if c.goKind == goruntime.NoSwitch {
		return nil
	}
	if pc, ok := c.Caller.PC(); ok && !c.mayReturnTo(pc) {
		return fmt.Errorf("%w: the caller found, %#x, is not code: the frame is on the other stack", ErrGoSwitch, pc)
	}
	return nil
}

// cloneChildAt reports whether the cursor's PC, in runtime.clone, is in
// the part only the new thread runs.
func cloneChildAt(c *Cursor) bool {
	v := c.PC - c.Map.Bias
	for _, r := range c.info.goSwitch {
		if r.kind == goruntime.Clone && r.child != 0 && v >= r.child && v < r.hi {
			return true
		}
	}
	return false
}

// newGoThread says whether the innermost frame, in runtime.clone, is a
// thread the clone system call just created, stopped before its first
// instruction (as every thread is that has not run yet when a capture
// interrupts it): just past the SYSCALL, with the child's return value 0
// (the parent's is the child's id, or an error). The kernel started it
// on its new, empty system stack: clone is its entry, and the return
// address the frame's CFI finds at the top of that stack is whatever
// the memory above it holds.
func newGoThread(c *Cursor) bool {
	ax, ok := c.get(0) // rax
	if !ok || ax != 0 || c.PC < 8 {
		return false
	}
	code, err := c.Read(c.PC - 8)
	return err == nil && code>>48 == 0x050f // 0f 05: SYSCALL
}

// goFrameRecord continues at the frame record bp points to. cross says the
// record is on another stack than the current frame.
func goFrameRecord(c *Cursor, bp uint64, cross bool) error {
	if bp == 0 {
		return ErrChainEnd
	}
	if bp&7 != 0 {
		return fmt.Errorf("%w: %#x is misaligned", ErrBadFP, bp)
	}
	saved, ra, err := c.mem.pair(bp)
	if err != nil {
		if cross {
			return fmt.Errorf("%w: the goroutine's frame record at %#x is not in the snapshot", ErrGoSwitch, bp)
		}
		return err
	}
	if ra == 0 {
		return ErrChainEnd
	}
	if !c.goCode(ra) {
		return fmt.Errorf("%w: return address %#x at %#x is not in mapped code", ErrBadFP, ra, bp+8)
	}
	setCaller(c, ra, bp+16, saved)
	c.stackSwitch = cross
	return nil
}

func setCaller(c *Cursor, pc, sp, fp uint64) {
	arch := c.Regs.Arch
	*c.Caller = regs.New(arch)
	c.Caller.Set(arch.PC(), pc)
	c.Caller.Set(arch.SP(), sp)
	c.Caller.Set(arch.FP(), fp)
}

// goCode reports whether pc lies in a mapped object file.
func (c *Cursor) goCode(pc uint64) bool {
	m := c.space.Find(pc)
	return m != nil && m.Module != nil
}

// goScanWords bounds the search for systemstack's return address in its
// caller's frame.
const goScanWords = 512

// goSystemstackStep: bp is the frame pointer of systemstack's caller F on
// the goroutine stack. F's frame lies below its frame record, and the word
// just below F's frame is the return address into F after its call to
// systemstack: the first word below bp that follows a direct call to
// start. Without it (code unreadable, an indirect call), the walk goes on
// at F's caller through the frame record, as the kernel's does.
func goSystemstackStep(c *Cursor, start, bp uint64) error {
	if bp == 0 || bp&7 != 0 {
		return fmt.Errorf("%w: runtime.systemstack: goroutine frame pointer %#x", ErrBadFP, bp)
	}
	if _, err := c.Read(bp); err != nil {
		return fmt.Errorf("%w: the goroutine's frame record at %#x is not in the snapshot", ErrGoSwitch, bp)
	}
	var block [goScanWords * 8]byte
	lo := bp - uint64(len(block))
	if c.mem.read(lo, block[:]) == nil {
		for i := goScanWords - 1; i >= 0; i-- {
			ra := binary.LittleEndian.Uint64(block[i*8:])
			if ra > start && ra-start < 1<<31 || start > ra && start-ra < 1<<31 {
				if callsAt(c, ra, start) && frameFits(c, ra, lo+uint64(i*8)+8, bp) {
					setCaller(c, ra, lo+uint64(i*8)+8, bp)
					c.stackSwitch = true
					return nil
				}
			}
		}
	}
	return goFrameRecord(c, bp, true)
}

// frameFits checks a candidate return address ra into systemstack's
// caller F, whose stack pointer it implies is sp, against F's frame record
// at bp: where the module's CFI, or else its Go pcln table, describes F,
// its CFA at ra must be the record's end (Go pushes the frame pointer
// right below the return address). Without either, the call instruction
// alone decides.
func frameFits(c *Cursor, ra, sp, bp uint64) bool {
	m := c.space.Find(ra - 1)
	if m == nil || m.Module == nil {
		return false
	}
	v := ra - 1 - m.Bias
	if t, err := m.Module.Table(); err == nil && t != nil {
		if rule, ok := t.Lookup(v); ok {
			return rule.CFABase == unwindtable.CFASP && sp+uint64(int64(rule.CFAOffset)) == bp+16
		}
	}
	if gt := goruntime.TableOf(m.Module); gt != nil {
		if f, ok := gt.Func(v); ok {
			if d, err := gt.SPDelta(&f, v); err == nil {
				return sp+uint64(int64(d))+8 == bp+16
			}
		}
	}
	return true
}

// callsAt reports whether the 5 bytes before ra are a direct call
// (E8 rel32) of target, or of anything when target is 0.
func callsAt(c *Cursor, ra, target uint64) bool {
	m := c.space.Find(ra - 5)
	if m == nil || m.Module == nil || m.Module.File == nil {
		return false
	}
	var code [5]byte
	if m.Module.File.ReadVaddr(ra-5-m.Bias, code[:]) != nil && c.mem.read(ra-5, code[:]) != nil {
		return false
	}
	if code[0] != 0xe8 {
		return false
	}
	rel := int32(binary.LittleEndian.Uint32(code[1:]))
	return target == 0 || ra+uint64(int64(rel)) == target
}
