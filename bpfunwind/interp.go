package bpfunwind

import (
	"fmt"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/rewindstack/rewind/runtimes"
	"github.com/rewindstack/rewind/target"
)

// IMaxFrames is the most interpreted frames the kernel walk keeps per
// stack (I_MAX_FRAMES in bpf/interp.h); deeper stacks end with
// iEndDepth after the innermost ones.
const IMaxFrames = 128

// IMaxStacks bounds the interpreted stacks kept between two reads (3 KiB
// each, allocated as they come: at most 24 MiB); a stack that finds the
// map full is counted in Errors.StacksFull and has no interpreted frames.
const IMaxStacks = 8192

// Why a part's walk of interpreted frames stopped early (istack.end).
const (
	iEndComplete   = 0
	iEndUnreadable = 1
	iEndDepth      = 2
	iEndNoThread   = 3
	iEndTrace      = 4
)

// iFrameVal and iStackVal mirror struct iframe and struct istack.
type iFrameVal struct {
	Code  uint64
	Check uint64
	Off   uint32
	Act   uint16
	Flags uint16
}

type iStackVal struct {
	N      uint32
	End    uint8
	Acts   uint8
	Kind   uint8
	_      uint8
	Frames [IMaxFrames]iFrameVal
}

// part is a runtime's part of the program: the maps of its processes
// and (for a runtime whose walk starts from a thread's state) threads.
type part struct {
	kind    uint8
	procs   *ebpf.Map
	threads *ebpf.Map // nil: none
}

// partNames are the runtimes the program has a part for, by
// runtimes.Runtime.Name, with their istack.kind.
var partNames = map[string]uint8{"python": 1, "lua": 2, "ruby": 3}

// part returns the part serving the runtime named name.
func (u *Unwinder) part(name string) (part, bool) {
	switch name {
	case "python":
		return part{kind: partNames[name], procs: u.objs.Pyprocs, threads: u.objs.Pythreads}, true
	case "lua":
		return part{kind: partNames[name], procs: u.objs.Luaprocs}, true
	case "ruby":
		return part{kind: partNames[name], procs: u.objs.Rbprocs, threads: u.objs.Rbthreads}, true
	}
	return part{}, false
}

// iProc is a process whose interpreted frames a part walks.
type iProc struct {
	pid     int
	rt      runtimes.Kernel
	p       part
	kp      runtimes.KernelProcess
	entry   []target.PCRange
	threads map[int]uint64 // tid -> thread state, as told to the program
}

// iState is the unwinder's interpreter processes, by part kind and pid.
type iState struct {
	mu    sync.Mutex
	procs map[uint8]map[int]*iProc
}

// kernelRuntimes are the registered runtimes the program has a part
// for (none in a program that links in no runtime).
func kernelRuntimes() []runtimes.Kernel {
	var out []runtimes.Kernel
	for _, r := range runtimes.All() {
		if k, ok := r.(runtimes.Kernel); ok {
			if _, has := partNames[k.Name()]; has {
				out = append(out, k)
			}
		}
	}
	return out
}

// describeInterp tells the program how to walk the interpreted frames of
// process pid, for each runtime it runs; it forgets them for those it
// does not (any more).
func (u *Unwinder) describeInterp(pid int, maps []target.Mapping) {
	for _, k := range kernelRuntimes() {
		pt, _ := u.part(k.Name())
		kp, err := k.KernelProcess(pid, maps)
		if kp == nil {
			if err != nil {
				u.note(err.Error())
			}
			u.forgetInterpPart(pt.kind, pid)
			continue
		}
		p := &iProc{pid: pid, rt: k, p: pt, kp: kp, entry: kp.EntryPCs(), threads: map[int]uint64{}}
		u.interp.mu.Lock()
		if old := u.interp.procs[pt.kind][pid]; old != nil && kp.Adopt(old.kp) {
			p.threads = old.threads
		}
		if u.interp.procs == nil {
			u.interp.procs = map[uint8]map[int]*iProc{}
		}
		if u.interp.procs[pt.kind] == nil {
			u.interp.procs[pt.kind] = map[int]*iProc{}
		}
		u.interp.procs[pt.kind][pid] = p
		u.interp.mu.Unlock()
		if err := pt.procs.Update(uint32(pid), kp.Value(), ebpf.UpdateAny); err != nil {
			u.note(fmt.Sprintf("the BPF %s process map is full", k.Name()))
			continue
		}
		u.interpThreads(p)
	}
}

// interpThreads tells the program the thread states of p's threads: the
// ones started since are read again at every Read. (u.mu is taken after
// u.interp.mu, never while holding it: forgetExited holds u.mu.)
func (u *Unwinder) interpThreads(p *iProc) {
	if r, ok := p.kp.(runtimes.KernelRefresh); ok && u.refreshed(p, r) {
		// What the program walks by was found since (an interpreter
		// state made after the process was described).
		if err := p.p.procs.Update(uint32(p.pid), p.kp.Value(), ebpf.UpdateAny); err != nil {
			u.note(fmt.Sprintf("the BPF %s process map is full", p.rt.Name()))
		}
	}
	if p.p.threads != nil && !u.interpThreadsLocked(p) {
		u.note(fmt.Sprintf("the BPF %s thread map is full", p.rt.Name()))
	}
}

// refreshed lets r (p's reader) look again for what the program walks
// by, under the lock its naming of frames runs under.
func (u *Unwinder) refreshed(p *iProc, r runtimes.KernelRefresh) bool {
	u.interp.mu.Lock()
	defer u.interp.mu.Unlock()
	if !r.Refresh() {
		return false
	}
	p.entry = p.kp.EntryPCs()
	return true
}

func (u *Unwinder) interpThreadsLocked(p *iProc) bool {
	u.interp.mu.Lock()
	defer u.interp.mu.Unlock()
	ts, err := p.kp.ThreadStates()
	if err != nil {
		return true
	}
	for tid, addr := range ts {
		if p.threads[tid] == addr {
			continue
		}
		if err := p.p.threads.Update(uint32(tid), addr, ebpf.UpdateAny); err != nil {
			return false
		}
		p.threads[tid] = addr
	}
	for tid := range p.threads {
		if _, ok := ts[tid]; !ok {
			p.p.threads.Delete(uint32(tid))
			delete(p.threads, tid)
		}
	}
	return true
}

// refreshInterp reads process pid's thread states again: the program met
// a thread running an interpreter it has none for (notice kind 3).
func (u *Unwinder) refreshInterp(pid int) {
	u.interp.mu.Lock()
	var ps []*iProc
	for _, m := range u.interp.procs {
		if p := m[pid]; p != nil {
			ps = append(ps, p)
		}
	}
	u.interp.mu.Unlock()
	for _, p := range ps {
		u.interpThreads(p)
	}
}

// forgetInterp drops what is kept of process pid's interpreters.
func (u *Unwinder) forgetInterp(pid int) {
	for _, k := range kernelRuntimes() {
		pt, _ := u.part(k.Name())
		u.forgetInterpPart(pt.kind, pid)
	}
}

func (u *Unwinder) forgetInterpPart(kind uint8, pid int) {
	u.interp.mu.Lock()
	defer u.interp.mu.Unlock()
	p := u.interp.procs[kind][pid]
	delete(u.interp.procs[kind], pid)
	if p == nil {
		return
	}
	p.kp.Close()
	p.p.procs.Delete(uint32(pid))
	if p.p.threads != nil {
		for tid := range p.threads {
			p.p.threads.Delete(uint32(tid))
		}
	}
}

// iRead names the interpreted frames of one Read's stacks.
type iRead struct {
	u    *Unwinder
	read []uint64 // keys of istacks read, deleted when done
	sv   iStackVal
}

func (u *Unwinder) interpReader() *iRead {
	return &iRead{u: u}
}

// stacks returns the interpreted frames kept with the stack at key, as
// the profile splices them (above the frames of their runtime's entry),
// nil when there are none.
func (r *iRead) stacks(pid int, key uint64) []target.InterpStack {
	u := r.u
	if err := u.objs.Istacks.Lookup(key, &r.sv); err != nil {
		return nil
	}
	r.read = append(r.read, key)
	sv := &r.sv
	u.interp.mu.Lock()
	defer u.interp.mu.Unlock()
	p := u.interp.procs[sv.Kind][pid]
	if p == nil {
		return nil
	}
	n := min(int(sv.N), IMaxFrames)
	fs := make([]runtimes.KernelFrame, n)
	for i, f := range sv.Frames[:n] {
		fs[i] = runtimes.KernelFrame{Code: f.Code, Check: f.Check, Off: f.Off, Flags: f.Flags, Act: int(f.Act)}
	}
	out := p.kp.Frames(fs, iEndName(sv.End), int(sv.Acts))
	if len(out) == 0 {
		return nil
	}
	return []target.InterpStack{{Entry: p.rt.Entry(), EntryPCs: p.entry, Frames: out}}
}

func iEndName(e uint8) string {
	switch e {
	case iEndComplete:
		return ""
	case iEndUnreadable:
		return "unreadable frame"
	case iEndDepth:
		return fmt.Sprintf("more than %d frames", IMaxFrames)
	case iEndNoThread:
		return "no thread state"
	case iEndTrace:
		return "in a compiled trace"
	}
	return fmt.Sprintf("end %d", e)
}

// done deletes the interpreted stacks read (the program writes them
// again with every stack it counts), and reads the thread states of the
// interpreter processes again (threads started since).
func (r *iRead) done() {
	u := r.u
	for _, k := range r.read {
		u.objs.Istacks.Delete(k)
	}
	u.interp.mu.Lock()
	var procs []*iProc
	for _, m := range u.interp.procs {
		for _, p := range m {
			procs = append(procs, p)
		}
	}
	u.interp.mu.Unlock()
	for _, p := range procs {
		u.interpThreads(p)
	}
}
