package cpython

import (
	"debug/elf"
	"encoding/binary"
	"fmt"

	"github.com/rewindstack/rewind/runtimes"
	"github.com/rewindstack/rewind/target"
)

// runtimeTStateCurrent311 is the offset of _PyRuntime.gilstate.tstate_current
// in 3.11 (the thread state of the thread holding the GIL, NULL while no
// thread holds it): after the runtime's ceval state with its GIL, checked
// on Debian's 3.11 by reading it with the GIL held and released.
const runtimeTStateCurrent311 = 576

// Probe is what a walker of the interpreter frames inside the kernel
// (package bpfunwind) needs of one process's interpreter: where the
// evaluation loop's code is, how to find a thread's state, and the
// offsets of the fields it follows.
type Probe struct {
	// EvalStart and EvalEnd bound _PyEval_EvalFrameDefault in the
	// process (both 0 when the interpreter does not name it).
	EvalStart, EvalEnd uint64
	// BodyStart and BodyEnd bound the part of the evaluation loop the
	// compiler moved out of the function (GCC's hot/cold split of sid's
	// python3.14 jumps from a 1,184-byte _PyEval_EvalFrameDefault into an
	// 84 KiB body with an unwind entry, but no symbol, of its own): a
	// native frame there runs an activation too. Both 0 when there is
	// none.
	BodyStart, BodyEnd uint64
	// TStateCurrent is the address of the word naming the thread state
	// of the thread that holds the GIL (3.11), 0 when there is none.
	TStateCurrent uint64
	// TSNativeTID and TSFrame are PyThreadState's native_thread_id and
	// current frame (a _PyCFrame whose current_frame is at CFrameCurrent
	// when ViaCFrame: 3.11, 3.12).
	TSNativeTID, TSFrame, CFrameCurrent uint32
	ViaCFrame                           bool
	// The _PyInterpreterFrame fields: previous, code object,
	// instruction pointer, owner, and 3.11's is_entry (-1 otherwise).
	FramePrev, FrameCode, FrameInstr, FrameOwner uint32
	FrameIsEntry                                 int32
	// CodeQualname is PyCodeObject.co_qualname.
	CodeQualname uint32
	// OwnerCStack and OwnerCStack2 are the owner values of the entry
	// frames an activation keeps on the C stack (3.12+; 0xff: none).
	OwnerCStack, OwnerCStack2 uint8
}

// Probe returns the process's Probe; its error names the interpreter's
// file when that cannot be read.
func (rt *Runtime) Probe() (Probe, error) {
	l := &rt.l
	p := Probe{TSNativeTID: uint32(l.tsNativeTID), TSFrame: uint32(l.tsFrame), CFrameCurrent: uint32(l.cframeCurrent), ViaCFrame: l.viaCFrame,
		FramePrev: uint32(l.framePrev), FrameCode: uint32(l.frameCode), FrameInstr: uint32(l.frameInstr), FrameOwner: uint32(l.frameOwner),
		FrameIsEntry: int32(l.frameIsEntry), CodeQualname: uint32(l.codeQualname), OwnerCStack: l.ownerCStack, OwnerCStack2: l.ownerCStack2}
	if l.minor == 11 {
		p.TStateCurrent = rt.Addr + runtimeTStateCurrent311
	}
	f, err := elf.Open(rt.Path)
	if err != nil {
		return p, fmt.Errorf("%s: %w", rt.Path, err)
	}
	defer f.Close()
	for _, syms := range []func() ([]elf.Symbol, error){f.DynamicSymbols, f.Symbols} {
		list, _ := syms()
		for _, s := range list {
			if s.Name == "_PyEval_EvalFrameDefault" && s.Value != 0 && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
				p.EvalStart, p.EvalEnd = s.Value+rt.bias, s.Value+rt.bias+max(s.Size, 1)
				if lo, hi, ok := evalBody(f, s.Value, s.Size); ok {
					p.BodyStart, p.BodyEnd = lo+rt.bias, hi+rt.bias
				}
				return p, nil
			}
		}
	}
	return p, nil
}

// ThreadStates returns the address of every thread state of the
// process, by native thread id.
func (rt *Runtime) ThreadStates(mem target.Memory) (map[int]uint64, error) {
	w := newWalker(&rt.l, mem)
	l := &rt.l
	out := map[int]uint64{}
	interp, err := w.ptr(rt.Addr + l.runtimeInterps)
	if err != nil {
		return nil, fmt.Errorf("_PyRuntime.interpreters.head: %w", err)
	}
	seen := map[uint64]bool{}
	for n := 0; interp != 0 && n < maxInterps; n++ {
		ts, err := w.ptr(interp + l.interpThreads)
		if err != nil {
			return out, fmt.Errorf("interpreter state at %#x: %w", interp, err)
		}
		for ts != 0 && !seen[ts] && len(seen) < maxThreads {
			seen[ts] = true
			tid, err := w.ptr(ts + l.tsNativeTID)
			if err != nil {
				return out, fmt.Errorf("thread state at %#x: %w", ts, err)
			}
			out[int(int32(tid))] = ts
			if ts, err = w.ptr(ts + l.tsNext); err != nil {
				return out, fmt.Errorf("thread state at %#x: %w", ts, err)
			}
		}
		if interp, err = w.ptr(interp + l.interpNext); err != nil {
			return out, fmt.Errorf("interpreter state at %#x: %w", interp, err)
		}
	}
	return out, nil
}

// Codes symbolizes the (code object, instruction) pairs a walk inside the
// kernel recorded, reading each code object once; it keeps them, so that
// pairs read after the process exited are still named when their code
// objects were read before.
type Codes struct {
	w     walker
	names map[uint64]uint64 // code object -> its co_qualname when read
}

// NewCodes returns a symbolizer of rt's code objects in mem.
func (rt *Runtime) NewCodes(mem target.Memory) *Codes {
	return &Codes{w: newWalker(&rt.l, mem), names: map[uint64]uint64{}}
}

// SetMemory replaces the memory the code objects are read from.
func (c *Codes) SetMemory(mem target.Memory) { c.w.mem = mem }

// Frame names the frame running code object co, whose co_qualname was
// qualname when it ran, at instr bytes from the object's start, or says
// why it cannot be read: a code object whose co_qualname is not that
// one any more was freed, and its memory reused. show is false for a
// frame CPython does not show (just pushed, before its code's first
// traceable instruction).
func (c *Codes) Frame(co, qualname uint64, instr uint32, activation int) (f Frame, show bool, err error) {
	c.w.spent = 0 // the budget is a walk's; each call reads at most one code object
	c.w.over = false
	c.w.notes = c.w.notes[:0]
	if name, ok := c.names[co]; ok && name != qualname {
		// Another object at that address than the one read: read
		// again.
		delete(c.w.codes, co)
		delete(c.names, co)
	}
	if _, ok := c.names[co]; !ok {
		name, err := c.w.ptr(co + c.w.l.codeQualname)
		if err != nil {
			return Frame{Activation: activation, Line: -1}, true, fmt.Errorf("code object at %#x: %w", co, err)
		}
		if name != qualname {
			return Frame{Activation: activation, Line: -1}, true, fmt.Errorf("code object at %#x was freed", co)
		}
		c.names[co] = name
	}
	cd, err := c.w.code(co)
	if err != nil {
		return Frame{Activation: activation, Line: -1}, true, err
	}
	unit := (int64(instr) - int64(c.w.l.codeAdaptive)) / 2
	if cd.firstTraceable >= 0 && unit < int64(cd.firstTraceable) {
		return Frame{}, false, nil
	}
	line := cd.firstLine
	if unit >= 0 && unit < 1<<31 {
		line = cd.lines.line(int(unit))
	}
	return Frame{Function: cd.qualname, File: cd.file, Line: line, Activation: activation}, true, nil
}

// Forget drops the code objects read so far (the process exited or
// exec'd, or too many are kept).
func (c *Codes) Forget() { clear(c.w.codes); clear(c.w.types); clear(c.names) }

// Len is the number of code objects kept.
func (c *Codes) Len() int { return len(c.w.codes) }

// minBody is the smallest unwind entry evalBody takes for the loop's
// body: the evaluation loop is tens of KiB, a cold error path is not.
const minBody = 16 << 10

// evalBody finds the evaluation loop's body outside
// _PyEval_EvalFrameDefault's own bytes [start, start+size) (link-time
// addresses): the largest unwind entry, of at least minBody, holding a
// target of the function's direct jumps (jmp rel32, jcc rel32) outside
// itself. ok is false when there is none (the loop is all in the
// function, as in Debian's 3.11).
func evalBody(f *elf.File, start, size uint64) (lo, hi uint64, ok bool) {
	if f.Machine != elf.EM_X86_64 || size == 0 || size > 1<<20 {
		return 0, 0, false
	}
	code := runtimes.FileBytes(f, start, size)
	targets := map[uint64]bool{}
	for i := 0; i+5 <= len(code); i++ {
		var rel int32
		var next int
		switch {
		case code[i] == 0xe9:
			rel, next = int32(binary.LittleEndian.Uint32(code[i+1:])), i+5
		case code[i] == 0x0f && i+6 <= len(code) && code[i+1]&0xf0 == 0x80:
			rel, next = int32(binary.LittleEndian.Uint32(code[i+2:])), i+6
		default:
			continue
		}
		t := uint64(int64(start) + int64(next) + int64(rel))
		if t < start || t >= start+size {
			targets[t] = true
		}
	}
	if len(targets) == 0 {
		return 0, 0, false
	}
	for _, fd := range runtimes.EhFrame(f) {
		if fd.End-fd.Start < minBody || fd.End-fd.Start <= hi-lo || (fd.Start <= start && start < fd.End) {
			continue
		}
		for t := range targets {
			if fd.Start <= t && t < fd.End {
				lo, hi, ok = fd.Start, fd.End, true
				break
			}
		}
	}
	return lo, hi, ok
}
