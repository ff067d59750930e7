package bpfunwind

import (
	"fmt"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/runtimes/cpython"
	"github.com/rewindstack/rewind/target"
)

// PyMaxFrames is the most CPython frames the kernel walk keeps per stack
// (PY_MAX_FRAMES in bpf/python.h); deeper Python stacks end with
// PyEndDepth after the innermost ones.
const PyMaxFrames = 128

// PyMaxStacks bounds the Python stacks kept between two reads (3 KiB
// each, allocated as they come: at most 24 MiB); a stack that finds the
// map full is counted in Errors.StacksFull and has no Python frames.
const PyMaxStacks = 8192

// Why a kernel walk of CPython frames stopped early (py_stack.end).
const (
	pyEndComplete   = 0
	pyEndUnreadable = 1
	pyEndDepth      = 2
	pyEndNoThread   = 3
)

// pyProcVal mirrors struct py_proc.
type pyProcVal struct {
	EvalStart, EvalEnd, TStateCurrent          uint64
	TSTID, TSFrame, CFrameCurrent, ViaCFrame   uint32
	FramePrev, FrameCode, FrameInstr, FrameOwn uint32
	FrameIsEntry                               int32
	CodeQualname                               uint32
	OwnerCStack, OwnerCStack2                  uint8
	_                                          [6]uint8
}

// pyFrameVal and pyStackVal mirror struct py_frame and struct py_stack.
type pyFrameVal struct {
	Code     uint64
	Qualname uint64
	Instr    uint32
	Act      uint16
	_        uint16
}

type pyStackVal struct {
	N      uint32
	End    uint8
	Acts   uint8
	_      [2]uint8
	Frames [PyMaxFrames]pyFrameVal
}

// pyProc is a CPython process the program walks the frames of.
type pyProc struct {
	rt      *cpython.Runtime
	mem     *live.ProcMemory
	codes   *cpython.Codes
	threads map[int]uint64 // tid -> thread state, as told to the program
}

// pyState is the unwinder's CPython processes.
type pyState struct {
	mu    sync.Mutex
	procs map[int]*pyProc
}

// maxCodes bounds the code objects kept per process.
const maxCodes = 1 << 16

// describePython tells the program how to walk the Python frames of
// process pid, when it runs CPython 3.11 or later; it forgets them when
// it does not (any more).
func (u *Unwinder) describePython(pid int, maps []target.Mapping) {
	mem := live.NewProcMemory(pid)
	rt, err := cpython.Find(maps, mem, cpython.ProcessFile(pid))
	if rt == nil {
		if err != nil {
			u.note(fmt.Sprintf("Python frames of process %d: %v", pid, err))
		}
		u.forgetPython(pid)
		return
	}
	pr, err := rt.Probe()
	if err != nil {
		u.note(fmt.Sprintf("Python frames of process %d: %v", pid, err))
		u.forgetPython(pid)
		return
	}
	if pr.EvalStart == 0 {
		u.note(fmt.Sprintf("Python frames not walked in the kernel: %s does not name _PyEval_EvalFrameDefault", rt.Path))
		u.forgetPython(pid)
		return
	}
	v := pyProcVal{EvalStart: pr.EvalStart, EvalEnd: pr.EvalEnd, TStateCurrent: pr.TStateCurrent,
		TSTID: pr.TSNativeTID, TSFrame: pr.TSFrame, CFrameCurrent: pr.CFrameCurrent,
		FramePrev: pr.FramePrev, FrameCode: pr.FrameCode, FrameInstr: pr.FrameInstr, FrameOwn: pr.FrameOwner,
		FrameIsEntry: pr.FrameIsEntry, CodeQualname: pr.CodeQualname, OwnerCStack: pr.OwnerCStack, OwnerCStack2: pr.OwnerCStack2}
	if pr.ViaCFrame {
		v.ViaCFrame = 1
	}
	p := &pyProc{rt: rt, mem: mem, codes: rt.NewCodes(mem), threads: map[int]uint64{}}
	u.py.mu.Lock()
	if old := u.py.procs[pid]; old != nil && old.rt.Path == rt.Path && old.rt.Addr == rt.Addr {
		// The same interpreter described again (a library loaded):
		// the code objects read stay good.
		p.codes, p.threads = old.codes, old.threads
		p.codes.SetMemory(mem)
		old.mem.Close()
	} else if old != nil {
		old.mem.Close()
	}
	if u.py.procs == nil {
		u.py.procs = map[int]*pyProc{}
	}
	u.py.procs[pid] = p
	u.py.mu.Unlock()
	if err := u.objs.Pyprocs.Update(uint32(pid), &v, ebpf.UpdateAny); err != nil {
		u.note("the BPF Python process map is full")
		return
	}
	u.pyThreads(p)
}

// pyThreads tells the program the thread states of p's threads: the ones
// started since are read again at every Read. (u.mu is taken after
// u.py.mu, never while holding it: forgetExited holds u.mu.)
func (u *Unwinder) pyThreads(p *pyProc) {
	if !u.pyThreadsLocked(p) {
		u.note("the BPF Python thread map is full")
	}
}

func (u *Unwinder) pyThreadsLocked(p *pyProc) bool {
	u.py.mu.Lock()
	defer u.py.mu.Unlock()
	ts, err := p.rt.ThreadStates(p.mem)
	if err != nil {
		return true
	}
	for tid, addr := range ts {
		if p.threads[tid] == addr {
			continue
		}
		if err := u.objs.Pythreads.Update(uint32(tid), addr, ebpf.UpdateAny); err != nil {
			return false
		}
		p.threads[tid] = addr
	}
	for tid := range p.threads {
		if _, ok := ts[tid]; !ok {
			u.objs.Pythreads.Delete(uint32(tid))
			delete(p.threads, tid)
		}
	}
	return true
}

// refreshPython reads process pid's thread states again: the program met
// a thread running Python it has none for (notice kind 3).
func (u *Unwinder) refreshPython(pid int) {
	u.py.mu.Lock()
	p := u.py.procs[pid]
	u.py.mu.Unlock()
	if p != nil {
		u.pyThreads(p)
	}
}

// forgetPython drops what is kept of process pid's interpreter.
func (u *Unwinder) forgetPython(pid int) {
	u.py.mu.Lock()
	defer u.py.mu.Unlock()
	p := u.py.procs[pid]
	delete(u.py.procs, pid)
	if p == nil {
		return
	}
	p.mem.Close()
	u.objs.Pyprocs.Delete(uint32(pid))
	for tid := range p.threads {
		u.objs.Pythreads.Delete(uint32(tid))
	}
}

// pyRead symbolizes the Python frames of one Read's stacks.
type pyRead struct {
	u    *Unwinder
	read []uint64 // keys of pystacks read, deleted when done
	sv   pyStackVal
}

func (u *Unwinder) pyReader() *pyRead {
	return &pyRead{u: u}
}

// frames returns the Python frames kept with the stack at key, nil when
// there are none.
func (r *pyRead) frames(pid int, key uint64) []target.InterpFrame {
	u := r.u
	u.py.mu.Lock()
	defer u.py.mu.Unlock()
	p := u.py.procs[pid]
	if p == nil {
		return nil
	}
	if err := u.objs.Pystacks.Lookup(key, &r.sv); err != nil {
		return nil
	}
	r.read = append(r.read, key)
	sv := &r.sv
	if p.codes.Len() > maxCodes {
		p.codes.Forget()
	}
	n := min(int(sv.N), PyMaxFrames)
	out := make([]target.InterpFrame, 0, n+1)
	for _, f := range sv.Frames[:n] {
		fr, show, err := p.codes.Frame(f.Code, f.Qualname, f.Instr, int(f.Act))
		if !show {
			continue
		}
		in := target.InterpFrame{Function: fr.Function, File: fr.File, Line: fr.Line, Method: "python", ParenLocation: true, Activation: int(f.Act)}
		switch {
		case err != nil:
			in.Function = fmt.Sprintf("[python code %#x]", f.Code)
		case in.Function == "":
			// The code object's name is not a printable str.
			in.Function = target.InvalidName
		}
		out = append(out, in)
	}
	if why := pyEndName(sv.End); why != "" {
		// The walk stopped early: said in the innermost activation
		// not walked.
		act := int(sv.Acts) - 1
		if len(out) > 0 {
			act = out[len(out)-1].Activation
		}
		out = append(out, target.InterpFrame{Function: "[python: " + why + "]", Method: "python", ParenLocation: true, Activation: max(act, 0)})
	}
	return out
}

// interpStacks are a stack's Python frames as the profile splices them:
// above the frames of CPython's evaluation loop.
func interpStacks(fs []target.InterpFrame) []target.InterpStack {
	if len(fs) == 0 {
		return nil
	}
	return []target.InterpStack{{Entry: cpython.EvalFunction, Frames: fs}}
}

func pyEndName(e uint8) string {
	switch e {
	case pyEndComplete:
		return ""
	case pyEndUnreadable:
		return "unreadable frame"
	case pyEndDepth:
		return fmt.Sprintf("more than %d frames", PyMaxFrames)
	case pyEndNoThread:
		return "no thread state"
	}
	return fmt.Sprintf("end %d", e)
}

// done deletes the Python stacks read (the program writes them again
// with every stack it counts), and reads the thread states of the
// Python processes again (threads started since).
func (r *pyRead) done() {
	u := r.u
	for _, k := range r.read {
		u.objs.Pystacks.Delete(k)
	}
	u.py.mu.Lock()
	procs := make([]*pyProc, 0, len(u.py.procs))
	for _, p := range u.py.procs {
		procs = append(procs, p)
	}
	u.py.mu.Unlock()
	for _, p := range procs {
		u.pyThreads(p)
	}
}
