// Package unwind is rewind's unwinder core. Everything that can be unwound
// is (registers, memory, mappings): a core file's thread, a ptrace snapshot,
// a perf sample, a saved fiber context. A Walk starts from a register set and
// asks a list of Steppers, one per source of unwind information (frame
// pointers, the compiled CFI table, SFrame), to compute each caller's
// registers. Every frame records the method that produced it and every walk
// records why it stopped. WalkMemo lets repeated walks of one thread (a
// profiler's samples) reuse the outer frames of the previous walk.
package unwind

import (
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/rewindstack/rewind/internal/goruntime"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/target"
)

// Method names the source of unwind information that produced a frame.
type Method uint8

// Methods.
const (
	// MethodContext: the frame came from the starting registers.
	MethodContext Method = iota
	// MethodFP: found by following the frame-pointer chain.
	MethodFP
	// MethodDWARF: found by the compiled DWARF CFI table.
	MethodDWARF
	// MethodSFrame: found by SFrame information.
	MethodSFrame
	// MethodSignal: restored from a signal frame's saved context.
	MethodSignal
	// MethodTailCall marks a frame that is not on the stack: a function
	// that left by a tail call, known from DWARF call-site information
	// (symbolize.Symbolizer.TailCallFrames). No walk produces it.
	MethodTailCall
	// MethodGoPCLN: found by a Go executable's pcln table (its pcsp
	// stack-pointer deltas), without DWARF.
	MethodGoPCLN
	// MethodGoSwitch: the first frame on a goroutine's stack past a Go
	// stack switch on g0 (runtime.morestack, runtime.systemstack), found
	// at the goroutine's saved registers in its g, as Go's traceback
	// crosses it (gojump.go).
	MethodGoSwitch
)

var methodNames = [...]string{"context", "fp", "dwarf", "sframe", "signal", "tail-call", "gopclntab", "go-stack-switch"}

func (m Method) String() string {
	if int(m) < len(methodNames) {
		return methodNames[m]
	}
	return fmt.Sprintf("method(%d)", uint8(m))
}

// MarshalText implements encoding.TextMarshaler.
func (m Method) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// EndReason says why a walk stopped.
type EndReason uint8

// Walk end reasons.
const (
	// EndOutermost: the chain ended naturally (a zero frame pointer or a
	// zero return address).
	EndOutermost EndReason = iota
	// EndRAUndefined: unwind information marks the return address
	// undefined, the CFI convention for a thread's outermost frame.
	EndRAUndefined
	// EndUnreadable: memory needed for the next frame could not be read.
	EndUnreadable
	// EndNoInfo: no method has unwind information for the frame's PC.
	EndNoInfo
	// EndNoProgress: the caller's CFA/stack pointer did not increase (a
	// loop, or a corrupt chain).
	EndNoProgress
	// EndDepth: the depth limit was reached.
	EndDepth
	// EndRegister: a rule needs a register whose value is not known in
	// this frame.
	EndRegister
	// EndBadFP: the frame pointer is misaligned or below the stack pointer.
	EndBadFP
	// EndGoSwitch: a Go stack switch (runtime.systemstack, morestack)
	// leads to a goroutine stack, or a g, that is not in the memory (see
	// goSwitch).
	EndGoSwitch
)

var endNames = [...]string{"outermost", "ra-undefined", "unreadable-memory", "no-unwind-info",
	"no-progress", "depth-limit", "register-unavailable", "bad-frame-pointer", "go-stack-switch"}

func (e EndReason) String() string {
	if int(e) < len(endNames) {
		return endNames[e]
	}
	return fmt.Sprintf("end(%d)", uint8(e))
}

// MarshalText implements encoding.TextMarshaler.
func (e EndReason) MarshalText() ([]byte, error) { return []byte(e.String()), nil }

// Frame is one physical frame of a walk.
type Frame struct {
	// PC is the current PC for frame 0 and for frames interrupted by a
	// signal, and the return address as stored on the stack for callers.
	PC uint64
	// SP is the frame's stack pointer (0 when unknown).
	SP uint64
	// Method is how this frame was found.
	Method Method
	// Exact is true when PC is the address of the next instruction to run
	// (frame 0, a frame interrupted by a signal, and the signal trampoline
	// itself) rather than a return address.
	Exact bool
	// Map is the mapping that holds the frame's lookup PC (nil when it is
	// in none), as the walk found it: symbolizers need not look it up again.
	Map *target.Mapping
}

// LookupPC is the address to symbolize and look unwind rules up at: the PC
// itself for exact frames, and the return address minus one for callers,
// which lies inside the call instruction (a call can be a function's last
// instruction, so the return address may belong to the next function).
func (f *Frame) LookupPC() uint64 {
	if f.Exact || f.PC == 0 {
		return f.PC
	}
	return f.PC - 1
}

// Stack is the result of a walk.
type Stack struct {
	Frames []Frame
	End    EndReason
	// Detail explains End (the unreadable address, the missing register).
	Detail string
}

// Errors a Stepper returns to end a walk or defer to the next stepper.
var (
	// ErrNoInfo: this stepper has no information for the PC; the next
	// stepper is tried.
	ErrNoInfo = errors.New("no unwind information")
	// ErrOutermost: unwind information marks the frame outermost (return
	// address undefined).
	ErrOutermost = errors.New("return address undefined: outermost frame")
	// ErrChainEnd: the frame chain ends here (zero frame pointer or zero
	// return address).
	ErrChainEnd = errors.New("end of the frame chain")
	// ErrRegister: a needed register value is not known.
	ErrRegister = errors.New("register value unknown")
	// ErrBadFP: the frame pointer cannot point at a frame record.
	ErrBadFP = errors.New("frame pointer invalid")
)

// Cursor is a Stepper's view of one frame and the place it writes the caller.
type Cursor struct {
	// Regs are the frame's registers.
	Regs *regs.Regs
	// PC is the frame's lookup address (see Frame.LookupPC).
	PC uint64
	// Exact reports whether PC is exact (see Frame.Exact).
	Exact bool
	// Map is the mapping containing PC, or nil.
	Map *target.Mapping
	// Caller receives the caller's registers; a stepper overwrites all of
	// it (regs.New, then Set).
	Caller *regs.Regs
	// CallerExact is set by a stepper when the caller's PC is exact (it
	// was restored from a signal frame).
	CallerExact bool
	// Method is set by a stepper that delegates (a table rule that marks a
	// signal frame produces MethodSignal).
	Method Method

	mem   *reader
	rules *ruleCache // nil: look every rule up
	info  *modInfo   // what the walk knows of Map's module (nil: no module)
	// space resolves addresses, for checks of return addresses.
	space *target.AddressSpace
	// stackSwitch: the caller is on another stack (a Go stack switch), so
	// its stack pointer need not lie above this frame's.
	stackSwitch bool
	// goKind is the Go switching function the frame is in, as goSwitch
	// found it (goruntime.NoSwitch: none, or a module without such functions).
	goKind goruntime.SwitchKind
	// goJumped: the step crossed from g0 to the goroutine at its saved
	// registers (gojump.go). g is the g register of the walk's first
	// frame (hasG: known), the g the thread runs.
	goJumped bool
	g        uint64
	hasG     bool
	// used is the registers of this frame the steppers read (bit n:
	// register n); pass, those a stepper handed to the caller unchanged
	// without reading them otherwise. A Memo compares only the registers
	// the rest of the walk depends on.
	used, pass uint64
}

// get returns register n of the frame, noting that the step read it.
func (c *Cursor) get(n int) (uint64, bool) {
	if n >= 0 && n < 64 {
		c.used |= 1 << uint(n)
	}
	return c.Regs.Get(n)
}

// passed returns register n of the frame for the caller's register n,
// unchanged (a "same value" rule).
func (c *Cursor) passed(n int) (uint64, bool) {
	if n >= 0 && n < 64 {
		c.pass |= 1 << uint(n)
	}
	return c.Regs.Get(n)
}

// Read reads one 64-bit word of target memory.
func (c *Cursor) Read(addr uint64) (uint64, error) { return c.mem.u64(addr) }

// Memory returns the memory being unwound.
func (c *Cursor) Memory() target.Memory { return c.mem.mem }

// A Stepper computes a frame's caller from one source of unwind information.
// It returns ErrNoInfo when it has nothing for the frame (so the next stepper
// is tried), or another error to end the walk.
type Stepper interface {
	Method() Method
	Step(c *Cursor) error
}

// Unwinder walks stacks with an ordered list of steppers: for each frame the
// first stepper that has information for it produces the caller.
type Unwinder struct {
	Steppers []Stepper
	// MaxDepth bounds the number of frames (default 1024).
	MaxDepth int
}

// NewFP returns an unwinder that follows frame pointers only.
func NewFP() *Unwinder { return &Unwinder{Steppers: []Stepper{FramePointers{}}} }

// NewDWARF returns an unwinder that uses the compiled CFI tables only.
func NewDWARF() *Unwinder { return &Unwinder{Steppers: []Stepper{CFITable{}}} }

// NewSFrame returns an unwinder that uses .sframe sections only.
func NewSFrame() *Unwinder { return &Unwinder{Steppers: []Stepper{SFrame{}}} }

// NewGoPCLN returns an unwinder that uses Go pcln tables only.
func NewGoPCLN() *Unwinder { return &Unwinder{Steppers: []Stepper{GoPCLN{}}} }

// NewAuto returns the default unwinder: per frame, SFrame where the object
// has it, else the compiled CFI table, else a Go program's pcln table,
// else frame pointers. Go code comes after CFI: Go's .debug_frame is
// written from the same pcsp table, so where a Go binary keeps its DWARF
// both find the same frames, and the pcln table serves the binaries
// built without it (-ldflags=-w).
func NewAuto() *Unwinder {
	return &Unwinder{Steppers: []Stepper{SFrame{}, CFITable{}, GoPCLN{}, FramePointers{}}}
}

// MethodNames are the names ByName accepts, the default first.
var MethodNames = []string{"auto", "dwarf", "fp", "sframe", "gopclntab"}

// ByName returns the unwinder for a method name: "auto" (NewAuto),
// "dwarf" (NewDWARF), "fp" (NewFP), "sframe" (NewSFrame) or "gopclntab"
// (NewGoPCLN). Every command, profile and test chooses its methods
// through it, so "auto" means the same chain everywhere.
func ByName(name string) (*Unwinder, error) {
	switch name {
	case "auto":
		return NewAuto(), nil
	case "dwarf":
		return NewDWARF(), nil
	case "fp":
		return NewFP(), nil
	case "sframe":
		return NewSFrame(), nil
	case "gopclntab":
		return NewGoPCLN(), nil
	}
	return nil, fmt.Errorf("unknown unwind method %q (want auto, dwarf, fp, sframe or gopclntab)", name)
}

// Walk unwinds the stack that starts at r, reading memory from mem and
// resolving addresses through space (which may be nil for frame pointers).
func (u *Unwinder) Walk(r regs.Regs, mem target.Memory, space *target.AddressSpace) Stack {
	var st Stack
	u.WalkInto(&st, r, mem, space)
	return st
}

// WalkInto is Walk reusing st's frame slice.
func (u *Unwinder) WalkInto(st *Stack, r regs.Regs, mem target.Memory, space *target.AddressSpace) {
	u.walk(st, r, mem, space, nil)
}

// walk is WalkInto, reusing and refilling memo when it is not nil (see
// WalkMemo).
func (u *Unwinder) walk(st *Stack, r regs.Regs, mem target.Memory, space *target.AddressSpace, memo *Memo) {
	st.Frames = st.Frames[:0]
	st.End, st.Detail = EndOutermost, ""
	max := u.MaxDepth
	if max <= 0 {
		max = 1024
	}
	w := walkPool.Get().(*walkState)
	defer func() {
		w.rd.mem, w.c, w.mods = nil, Cursor{}, modCache{} // do not keep the target alive from the pool
		walkPool.Put(w)
	}()
	log := w.rd.log[:0]
	w.rd = newReader(mem)
	w.rd.log = log
	w.c.mem, w.c.space, w.c.rules = &w.rd, space, &w.rules
	w.c.g, w.c.hasG = r.Get(gReg(r.Arch))
	if memo != nil && (w.rd.snap == nil || !u.memoable()) {
		memo = nil
	}
	// reuse: memo's walk is of this unwinder and space, so its frames
	// may be taken; from: the memo frame they were (-1: none).
	reuse, from := memo != nil && memo.u == u && memo.space == space, -1
	w.rd.track = memo != nil
	w.mf = w.mf[:0]
	if memo != nil {
		memo.scan = 0
		defer func() { memo.remember(u, space, &w.rd, st, w.mf, from) }()
	}
	cur, next := &w.regs[0], &w.regs[1]
	*cur = r
	exact := true
	method := MethodContext
	for {
		pc, ok := cur.PC()
		if !ok {
			st.End, st.Detail = EndRegister, "pc unknown"
			return
		}
		sp, _ := cur.SP()
		if pc == 0 {
			st.End = EndOutermost
			return
		}
		if len(st.Frames) >= max {
			st.End = EndDepth
			st.Detail = "stopped after " + strconv.Itoa(max) + " frames; use --max-depth N (a larger N) for the rest"
			return
		}
		lookup := pc
		if !exact {
			lookup-- // pc != 0 here
		}
		m := space.Find(lookup)
		// Fields are stored one by one: copying whole structs that hold
		// pointers into heap memory goes through the runtime's typed copy,
		// which showed as a fifth of a frame's cost.
		n := len(st.Frames)
		if n < cap(st.Frames) {
			st.Frames = st.Frames[:n+1]
		} else {
			st.Frames = append(st.Frames, Frame{})
		}
		f := &st.Frames[n]
		f.PC, f.SP, f.Method, f.Exact, f.Map = pc, sp, method, exact, m
		if memo != nil {
			if reuse && n > 0 {
				if from = memo.match(&w.rd, n, pc, sp, exact, cur, max); from >= 0 {
					memo.splice(st, n, from)
					return
				}
			}
			w.mf = append(w.mf, memoFrame{regs: *cur, exact: exact, read: len(w.rd.log)})
			w.rd.miss = false
		}
		c := &w.c
		info := w.mods.get(m)
		c.Regs, c.PC, c.Exact, c.Map, c.Caller, c.info = cur, lookup, exact, m, next, info
		c.CallerExact, c.Method, c.stackSwitch, c.used, c.pass, c.goKind, c.goJumped = false, 0, false, 0, 0, goruntime.NoSwitch, false
		root := rootAt(info, m, lookup, pc)
		if root == rootGo {
			st.End, st.Detail = EndOutermost, "Go runtime top frame"
			return
		}
		err := ErrNoInfo
		if info != nil && info.goSwitch != nil {
			if err = goSwitch(c); err != ErrNoInfo {
				goto stepped
			}
		}
		for _, s := range u.Steppers {
			c.Method = s.Method()
			if err = s.Step(c); err != ErrNoInfo && !errors.Is(err, ErrNoInfo) {
				break
			}
		}
		if c.goJumped && err == nil {
			// The steppers found the caller from the goroutine's
			// registers goSwitch set.
			c.Method = MethodGoSwitch
		}
	stepped:
		if memo != nil {
			a := &w.mf[n]
			a.miss, a.switched = w.rd.miss, c.stackSwitch
			a.used, a.pass = c.used, c.pass
		}
		method = c.Method
		if root == rootThread && !errors.Is(err, ErrOutermost) && !errors.Is(err, ErrChainEnd) {
			// Nothing is above a thread's entry function: whatever a
			// method finds past it (frame pointers read from bytes clone
			// or the kernel left there) is not a frame.
			st.End, st.Detail = EndOutermost, "thread root"
			return
		}
		if c.CallerExact {
			// This frame is a signal trampoline: the kernel, not a call
			// instruction, stored its address, so it is exact too.
			f.Exact = true
		} else if err == nil && info != nil && info.goSwitch != nil {
			err = goSwitchCaller(c)
		}
		if err != nil {
			st.End, st.Detail = endFor(err)
			return
		}
		// The stack grows down: a caller's stack pointer is above its
		// callee's. Equality is allowed for an exact frame (a leaf that has
		// not moved SP, as on arm64). A signal frame may switch stacks
		// (sigaltstack), so its restored SP is not checked.
		//
		// A Go stack switch (c.stackSwitch) leads to another stack,
		// which may lie below this one, but not back into the part of
		// this one the walk has passed; g0's label (goG0Label) is a
		// frame at the same SP as morestack's, which has none.
		if nsp, ok := next.SP(); ok && sp != 0 && !c.CallerExact {
			npc, _ := next.PC()
			if (nsp < sp || (nsp == sp && (npc == pc || !exact))) && !(c.stackSwitch && nsp < st.Frames[0].SP) &&
				!(c.goJumped && nsp == sp && npc != pc) {
				st.End, st.Detail = EndNoProgress, fmt.Sprintf("caller sp %#x, callee sp %#x", nsp, sp)
				return
			}
		}
		cur, next = next, cur
		exact = c.CallerExact
	}
}

// walkState is the scratch space of one walk, pooled so that walks do not
// allocate: the cursor handed to steppers, two register sets (this frame
// and its caller, swapped each step) and the memory reader's buffer.
type walkState struct {
	rd    reader
	c     Cursor
	regs  [2]regs.Regs
	mods  modCache
	rules ruleCache
	mf    []memoFrame // what a Memo keeps of each frame
}

var walkPool = sync.Pool{New: func() any { return new(walkState) }}

func endFor(err error) (EndReason, string) {
	switch {
	case errors.Is(err, ErrNoInfo):
		return EndNoInfo, ""
	case errors.Is(err, ErrGoSwitch):
		return EndGoSwitch, err.Error()
	case errors.Is(err, ErrOutermost):
		return EndRAUndefined, ""
	case errors.Is(err, ErrChainEnd):
		if err == ErrChainEnd {
			return EndOutermost, ""
		}
		return EndOutermost, err.Error()
	case isMemoryError(err):
		return EndUnreadable, err.Error()
	case errors.Is(err, ErrRegister):
		return EndRegister, err.Error()
	case errors.Is(err, ErrBadFP):
		return EndBadFP, err.Error()
	}
	return EndNoInfo, err.Error()
}

func isMemoryError(err error) bool {
	var me *target.MemoryError
	return errors.As(err, &me)
}
