package cpython

import (
	"fmt"

	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/runtimes"
	"github.com/rewindstack/rewind/target"
)

// maxCodes bounds the code objects kept per process.
const maxCodes = 1 << 16

// kernelValue mirrors struct py_proc (bpfunwind/bpf/python.h): what the
// kernel walk needs of a process's interpreter.
type kernelValue struct {
	EvalStart, EvalEnd, TStateCurrent          uint64
	TSTID, TSFrame, CFrameCurrent, ViaCFrame   uint32
	FramePrev, FrameCode, FrameInstr, FrameOwn uint32
	FrameIsEntry                               int32
	CodeQualname                               uint32
	OwnerCStack, OwnerCStack2                  uint8
	_                                          [6]uint8
	BodyStart, BodyEnd                         uint64
}

func (registered) Entry() string { return EvalFunction }

func (registered) KernelProcess(pid int, maps []target.Mapping) (runtimes.KernelProcess, error) {
	mem := live.NewProcMemory(pid)
	rt, err := Find(maps, mem, runtimes.ProcessFile(pid))
	if rt == nil {
		mem.Close()
		if err != nil {
			return nil, fmt.Errorf("Python frames of process %d: %v", pid, err)
		}
		return nil, nil
	}
	pr, err := rt.Probe()
	if err != nil {
		mem.Close()
		return nil, fmt.Errorf("Python frames of process %d: %v", pid, err)
	}
	if pr.EvalStart == 0 {
		mem.Close()
		return nil, fmt.Errorf("Python frames not walked in the kernel: %s does not name %s", rt.Path, EvalFunction)
	}
	v := kernelValue{EvalStart: pr.EvalStart, EvalEnd: pr.EvalEnd, TStateCurrent: pr.TStateCurrent,
		TSTID: pr.TSNativeTID, TSFrame: pr.TSFrame, CFrameCurrent: pr.CFrameCurrent,
		FramePrev: pr.FramePrev, FrameCode: pr.FrameCode, FrameInstr: pr.FrameInstr, FrameOwn: pr.FrameOwner,
		FrameIsEntry: pr.FrameIsEntry, CodeQualname: pr.CodeQualname, OwnerCStack: pr.OwnerCStack, OwnerCStack2: pr.OwnerCStack2,
		BodyStart: pr.BodyStart, BodyEnd: pr.BodyEnd}
	if pr.ViaCFrame {
		v.ViaCFrame = 1
	}
	return &kernelProc{rt: rt, mem: mem, codes: rt.NewCodes(mem), v: v}, nil
}

// kernelProc is a CPython process the kernel walk follows.
type kernelProc struct {
	rt    *Runtime
	mem   *live.ProcMemory
	codes *Codes
	v     kernelValue
}

func (p *kernelProc) Value() any { return &p.v }

func (p *kernelProc) Adopt(o runtimes.KernelProcess) bool {
	old, ok := o.(*kernelProc)
	if !ok {
		o.Close()
		return false
	}
	same := old.rt.Path == p.rt.Path && old.rt.Addr == p.rt.Addr
	if same {
		// The same interpreter described again (a library loaded): the
		// code objects read stay good.
		p.codes = old.codes
		p.codes.SetMemory(p.mem)
	}
	old.mem.Close()
	return same
}

func (p *kernelProc) ThreadStates() (map[int]uint64, error) { return p.rt.ThreadStates(p.mem) }

// EntryPCs are the evaluation loop's function and its body where the
// compiler split them (evalBody): a frame in the body has no name.
func (p *kernelProc) EntryPCs() []target.PCRange {
	if p.v.BodyEnd == 0 {
		return nil
	}
	return []target.PCRange{{Lo: p.v.EvalStart, Hi: p.v.EvalEnd}, {Lo: p.v.BodyStart, Hi: p.v.BodyEnd}}
}

func (p *kernelProc) Frames(fs []runtimes.KernelFrame, why string, acts int) []target.InterpFrame {
	if p.codes.Len() > maxCodes {
		p.codes.Forget()
	}
	out := make([]target.InterpFrame, 0, len(fs)+1)
	for _, f := range fs {
		if in, show := p.frame(f.Code, f.Check, f.Off, f.Act); show {
			out = append(out, in)
		}
	}
	if why != "" {
		// The walk stopped early: said in the innermost activation not
		// walked.
		act := acts - 1
		if len(out) > 0 {
			act = out[len(out)-1].Activation
		}
		out = append(out, target.InterpFrame{Function: "[python: " + why + "]", Method: "python", ParenLocation: true, Activation: max(act, 0)})
	}
	return out
}

func (p *kernelProc) frame(code, name uint64, off uint32, act int) (target.InterpFrame, bool) {
	fr, show, err := p.codes.Frame(code, name, off, act)
	if !show {
		return target.InterpFrame{}, false
	}
	in := target.InterpFrame{Function: fr.Function, File: fr.File, Line: fr.Line, Method: "python", ParenLocation: true, Activation: act}
	switch {
	case err != nil:
		in.Function = fmt.Sprintf("[python code %#x]", code)
	case in.Function == "":
		// The code object's name is not a printable str.
		in.Function = target.InvalidName
	}
	return in, true
}

func (p *kernelProc) Close() { p.mem.Close() }
