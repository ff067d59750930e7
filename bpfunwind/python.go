package bpfunwind

import (
	"fmt"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/rewindstack/rewind/runtimes"
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

// pyProc is a process whose interpreter frames the program walks.
type pyProc struct {
	kp      runtimes.KernelProcess
	threads map[int]uint64 // tid -> thread state, as told to the program
}

// pyState is the unwinder's interpreter processes.
type pyState struct {
	mu    sync.Mutex
	procs map[int]*pyProc
}

// kernelRuntime is the registered runtime the program's interpreter part
// (bpf/python.h: CPython's thread states and frames) serves, nil when
// none is registered (a program that links in no runtime).
func kernelRuntime() runtimes.Kernel {
	for _, r := range runtimes.All() {
		if k, ok := r.(runtimes.Kernel); ok {
			return k
		}
	}
	return nil
}

// describePython tells the program how to walk the interpreter frames of
// process pid, when it runs the kernel runtime (CPython 3.11 or later);
// it forgets them when it does not (any more).
func (u *Unwinder) describePython(pid int, maps []target.Mapping) {
	k := kernelRuntime()
	if k == nil {
		return
	}
	kp, err := k.KernelProcess(pid, maps)
	if kp == nil {
		if err != nil {
			u.note(err.Error())
		}
		u.forgetPython(pid)
		return
	}
	p := &pyProc{kp: kp, threads: map[int]uint64{}}
	u.py.mu.Lock()
	if old := u.py.procs[pid]; old != nil && kp.Adopt(old.kp) {
		p.threads = old.threads
	}
	if u.py.procs == nil {
		u.py.procs = map[int]*pyProc{}
	}
	u.py.procs[pid] = p
	u.py.mu.Unlock()
	if err := u.objs.Pyprocs.Update(uint32(pid), kp.Value(), ebpf.UpdateAny); err != nil {
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
	ts, err := p.kp.ThreadStates()
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
	p.kp.Close()
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
	p.kp.NewStack()
	n := min(int(sv.N), PyMaxFrames)
	out := make([]target.InterpFrame, 0, n+1)
	for _, f := range sv.Frames[:n] {
		if in, show := p.kp.Frame(f.Code, f.Qualname, f.Instr, int(f.Act)); show {
			out = append(out, in)
		}
	}
	if why := pyEndName(sv.End); why != "" {
		// The walk stopped early: said in the innermost activation
		// not walked.
		act := int(sv.Acts) - 1
		if len(out) > 0 {
			act = out[len(out)-1].Activation
		}
		out = append(out, p.kp.Cut(why, max(act, 0)))
	}
	return out
}

// interpStacks are a stack's interpreter frames as the profile splices
// them: above the frames of the kernel runtime's entry (CPython's
// evaluation loop).
func interpStacks(fs []target.InterpFrame) []target.InterpStack {
	if len(fs) == 0 {
		return nil
	}
	k := kernelRuntime()
	if k == nil {
		return nil
	}
	return []target.InterpStack{{Entry: k.Entry(), Frames: fs}}
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
