package ruby

import (
	"fmt"

	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/runtimes"
	"github.com/rewindstack/rewind/target"
)

// The kernel walk's part of Ruby (bpfunwind/bpf/ruby.h) records, for a
// sample whose native stack runs rb_vm_exec, the thread's control
// frames: (iseq, pc, frame flags) for a Ruby frame, (method entry, 0,
// flags) with flag kernelCFunc for a C method's. They are named here,
// afterwards, from the process's memory: iseqs live as long as their
// code is loaded, and each is checked again when read (its header).

// kernelCFunc marks a C method's frame in KernelFrame.Flags.
const kernelCFunc = 1

// maxKernelIseqs bounds the iseqs kept per process.
const maxKernelIseqs = 1 << 16

// kernelValue mirrors struct rb_proc (bpfunwind/bpf/ruby.h).
type kernelValue struct {
	EntryStart, EntryEnd                uint64
	THEC                                uint32
	THTID                               int32
	ECStack, ECStackSize, ECCFP         uint32
	CFPSize, CFPPC, CFPIseq, CFPEP, Pad uint32
}

func (registered) Entry() string { return Entry }

func (registered) KernelProcess(pid int, maps []target.Mapping) (runtimes.KernelProcess, error) {
	rt, err := Find(maps, runtimes.ProcessFile(pid))
	if rt == nil {
		return nil, note(err)
	}
	if rt.Exec.Hi == 0 {
		return nil, fmt.Errorf("Ruby frames not walked in the kernel: %s does not name %s", rt.Path, Entry)
	}
	l := rt.l
	v := kernelValue{EntryStart: rt.Exec.Lo, EntryEnd: rt.Exec.Hi, THEC: uint32(l.thEC), THTID: -1,
		ECStack: uint32(l.ecStack), ECStackSize: uint32(l.ecStackSize), ECCFP: uint32(l.ecCFP),
		CFPSize: uint32(l.cfpSize), CFPPC: uint32(l.cfpPC), CFPIseq: uint32(l.cfpIseq), CFPEP: uint32(l.cfpEP)}
	if l.thNT == 0 && l.thTID >= 0 {
		// The kernel thread id is the thread's own field: the program
		// checks it, so that a stale entry gives no frames.
		v.THTID = int32(l.thTID)
	}
	mem := live.NewProcMemory(pid)
	return &kernelProc{rt: rt, mem: mem, c: newCache(), v: v}, nil
}

// kernelProc is a Ruby process the kernel walk follows.
type kernelProc struct {
	rt  *Runtime
	mem *live.ProcMemory
	c   *cache
	v   kernelValue
}

func (p *kernelProc) Value() any { return &p.v }

func (p *kernelProc) Adopt(o runtimes.KernelProcess) bool {
	old, ok := o.(*kernelProc)
	if !ok {
		o.Close()
		return false
	}
	same := old.rt.Path == p.rt.Path && old.rt.VMPtr == p.rt.VMPtr
	if same {
		// The same VM described again (a library loaded): what was
		// read of its iseqs stays good.
		p.c = old.c
	}
	old.mem.Close()
	return same
}

// ThreadStates maps each Ruby thread's kernel id to its rb_thread_t.
func (p *kernelProc) ThreadStates() (map[int]uint64, error) {
	s, _, err := p.rt.read(p.mem, newCache(), readOpts{})
	if s == nil {
		return nil, err
	}
	out := make(map[int]uint64, len(s.Threads))
	for _, t := range s.Threads {
		if t.TID > 0 {
			out[t.TID] = t.Addr
		}
	}
	return out, nil
}

func (p *kernelProc) EntryPCs() []target.PCRange { return []target.PCRange{p.rt.Exec} }

// Frames names the control frames a sample recorded, as the dump's walk
// names them (frame): a C method's frame takes its caller's path and
// line.
func (p *kernelProc) Frames(fs []runtimes.KernelFrame, why string, acts int) []target.InterpFrame {
	if len(p.c.iseqs) > maxKernelIseqs {
		p.c = newCache()
	}
	w := p.rt.walker(p.mem, p.c, maxWalkTime)
	out := make([]Frame, 0, len(fs)+1)
	lastRuby := -1
	for _, kf := range fs {
		f := Frame{Activation: kf.Act}
		if kf.Flags&kernelCFunc != 0 {
			f.Label, f.CFunc = w.methodName(kf.Code), true
		} else {
			if uint64(kf.Off)&flagCFrame != 0 {
				continue // the VM's own frames (an ifunc's): not shown
			}
			info, err := w.iseq(kf.Code)
			if err != nil {
				f.Label = fmt.Sprintf("[ruby iseq %#x]", kf.Code)
			} else {
				f.Label, f.Path, f.Line = info.label, info.path, w.line(info, kf.Check)
			}
		}
		out = append(out, f)
		if !f.CFunc {
			for j := len(out) - 2; j > lastRuby; j-- {
				out[j].Path, out[j].Line = f.Path, f.Line
			}
			lastRuby = len(out) - 1
		}
	}
	if why != "" {
		act := acts - 1
		if len(out) > 0 {
			act = out[len(out)-1].Activation
		}
		out = append(out, Frame{Label: "[ruby: " + why + "]", Activation: max(act, 0)})
	}
	return Stack(out).Frames
}

func (p *kernelProc) Close() { p.mem.Close() }
