package luajit

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rewindstack/rewind/cfi"
	"github.com/rewindstack/rewind/internal/procmaps"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/runtimes"
	"github.com/rewindstack/rewind/target"
)

// The kernel walk's part of LuaJIT (bpfunwind/bpf/lua.h) records, for a
// sample whose native stack runs the VM, the running lua_State's frame
// links from the innermost frame's base down: each frame's function and
// link (a return PC or a frame type and size), as they were at sample
// time. The Lua stack itself is gone by the time they are named, so the
// links are laid out again, at their distances, in a stack made up here
// (kernelStack), and walked as a dump walks a real one: the names and
// lines come from the functions' prototypes and bytecode, which live as
// long as the functions, read from the process.

// Flags of the innermost recorded frame (lua.h's LUA_F_*).
const (
	kernelTrace  = 0x100 // it runs a compiled trace
	kernelLeafPC = 0x200 // the frame's Off is its bytecode PC's low 32 bits
)

// kernelValue mirrors struct lua_proc (bpfunwind/bpf/lua.h).
type kernelValue struct {
	G, VMStart, VMEnd         uint64
	GCurL, GJitBase, GVMState uint32
	LBase, LStack, LCframe    uint32
	CFRet, CFCFA, CFRBP       uint32
	FR2                       uint8
	_                         [3]uint8
}

// vmCode is where the VM's code is in its object and how its C frame is
// laid out there.
type vmCode struct {
	lo, hi           uint64 // file addresses
	cfa, ret, rbpOff uint32 // the C frame: CFA, return address and saved rbp, from its stack pointer
}

// maxPlaces bounds what a process's kernel reader keeps of its
// functions' places and names.
const maxPlaces = 1 << 16

// findRetry is how often a process whose global_State is not found yet
// is searched again.
const findRetry = time.Second

func (registered) Entry() string { return Entry }

func (registered) KernelProcess(pid int, maps []target.Mapping) (runtimes.KernelProcess, error) {
	obj, err := Find(maps, runtimes.ProcessFile(pid))
	if obj == nil {
		return nil, note(err)
	}
	layouts := obj.Layouts()
	if l, ok := obj.DWARF(); ok {
		layouts = []Layout{l}
	}
	f, err := elf.Open(obj.Path)
	if err != nil {
		return nil, note(err)
	}
	defer f.Close()
	vm, ok := vmCodeOf(f)
	if !ok {
		return nil, note(fmt.Errorf("not walked in the kernel: %s: the VM's code is not found (no lj_vm_asm_begin, no unwind entry of its C frame)", obj.Path))
	}
	bias, ok := runtimes.LoadBias(f, maps, obj.Mapping.Path)
	if !ok {
		return nil, note(fmt.Errorf("%s: no mapping of its first loadable segment", obj.Path))
	}
	p := &kernelProc{pid: pid, maps: maps, layouts: layouts, mem: live.NewProcMemory(pid),
		vm: target.PCRange{Lo: vm.lo + bias, Hi: vm.hi + bias}}
	p.v = kernelValue{VMStart: p.vm.Lo, VMEnd: p.vm.Hi, CFRet: vm.ret, CFCFA: vm.cfa, CFRBP: vm.rbpOff}
	if syms, err := f.Symbols(); err == nil {
		for _, sym := range syms {
			if stateVars[sym.Name] && sym.Value != 0 {
				p.stateVars = append(p.stateVars, sym.Value+bias)
			}
		}
	}
	p.find()
	return p, nil
}

// stateVars are the globals that hold a program's main lua_State where
// its symbol table names them: Tarantool's (whose Lua runs on fiber
// stacks, where the search of threads' stacks does not look), and the
// luajit command's own in a build that keeps its symbols.
var stateVars = map[string]bool{"tarantool_L": true, "globalL": true}

// kernelProc is a LuaJIT process the kernel walk follows.
type kernelProc struct {
	pid     int
	maps    []target.Mapping
	layouts []Layout
	mem     *live.ProcMemory
	vm      target.PCRange
	// stateVars are the addresses of globals that hold a lua_State.
	stateVars []uint64
	v         kernelValue
	l         *Layout // the layout the global_State was found with
	w         *Walker // names frames (its caches are kept)
	tried     time.Time
}

// find looks for the process's global_State: from the VM's C frames on
// its threads' stacks (the main thread's, and those of threads blocked
// in a system call, whose stack pointers /proc tells), with each
// candidate layout.
func (p *kernelProc) find() bool {
	p.tried = time.Now()
	sps := threadSPs(p.pid)
	for i := range p.layouts {
		l := &p.layouts[i]
		w := NewWalker(l, p.mem)
		for _, a := range p.stateVars {
			if L, ok := w.u64(a); ok && L != 0 {
				if g, ok := Global(w, L); ok {
					p.use(l, g)
					return true
				}
			}
		}
		for _, r := range p.stackRanges(sps) {
			for _, cf := range ScanStack(p.mem, l, r.Lo, r.Hi) {
				if g, ok := Global(w, cf.L); ok {
					p.use(l, g)
					return true
				}
			}
		}
	}
	return false
}

// use sets the program's description to global_State g, laid out as l.
func (p *kernelProc) use(l *Layout, g uint64) {
	p.l, p.w = l, NewWalker(l, p.mem)
	p.v.G = g
	p.v.GCurL, p.v.GJitBase, p.v.GVMState = uint32(l.gCurL), uint32(l.gJitBase), uint32(l.gVMState)
	p.v.LBase, p.v.LStack, p.v.LCframe = uint32(l.LBase), uint32(l.LStack), uint32(l.lCframe)
	p.v.FR2 = 0
	if l.GC64 {
		p.v.FR2 = 1
	}
}

// stackRanges are the stack ranges find searches: the main thread's
// stack, and from each stack pointer to its mapping's end.
func (p *kernelProc) stackRanges(sps []uint64) []target.PCRange {
	var out []target.PCRange
	for i := range p.maps {
		m := &p.maps[i]
		if m.Path == "[stack]" {
			out = append(out, target.PCRange{Lo: max(m.Start, m.End-maxScan), Hi: m.End})
		}
	}
	for _, sp := range sps {
		for i := range p.maps {
			if m := &p.maps[i]; m.Start <= sp && sp < m.End && m.Path != "[stack]" {
				out = append(out, target.PCRange{Lo: sp, Hi: m.End})
			}
		}
	}
	return out
}

// threadSPs are the stack pointers of process pid's threads blocked in a
// system call (/proc/PID/task/TID/syscall), which need no stop to read.
func threadSPs(pid int) []uint64 {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []uint64
	for i, e := range ents {
		if i == 1024 {
			break
		}
		b, err := os.ReadFile(dir + "/" + e.Name() + "/syscall")
		if err != nil {
			continue
		}
		// "NR a1 a2 a3 a4 a5 a6 SP PC" for a thread in a system call.
		if fs := strings.Fields(string(b)); len(fs) == 9 {
			if sp, err := strconv.ParseUint(strings.TrimPrefix(fs[7], "0x"), 16, 64); err == nil {
				out = append(out, sp)
			}
		}
	}
	return out
}

func (p *kernelProc) Value() any { return &p.v }

func (p *kernelProc) Adopt(o runtimes.KernelProcess) bool {
	old, ok := o.(*kernelProc)
	if !ok {
		o.Close()
		return false
	}
	same := old.v.G != 0 && old.vm == p.vm
	if same && p.v.G == 0 {
		// The same VM described again (a library loaded): the state
		// found stays good.
		p.v, p.l, p.w = old.v, old.l, old.w
		p.w.mem = p.mem
	}
	old.mem.Close()
	return same
}

// ThreadStates: the program finds a thread's state from the global
// one, and keeps no map of them.
func (p *kernelProc) ThreadStates() (map[int]uint64, error) { return nil, nil }

// Refresh searches for the global_State again while none is found, at
// most once a second: a LuaJIT state made after the process was
// described (rewind record -- luajit script).
func (p *kernelProc) Refresh() bool {
	if p.v.G != 0 || time.Since(p.tried) < findRetry {
		return false
	}
	if maps, err := procmaps.Read(p.pid); err == nil {
		p.maps = maps
	}
	return p.find()
}

func (p *kernelProc) EntryPCs() []target.PCRange { return []target.PCRange{p.vm} }

func (p *kernelProc) Frames(fs []runtimes.KernelFrame, why string, acts int) []target.InterpFrame {
	if p.l == nil || len(fs) == 0 {
		return nil
	}
	w := p.w
	if len(w.places) > maxPlaces || len(w.names) > maxPlaces {
		w.places, w.names = nil, nil
	}
	ks, L, cut := layOut(p.l, p.mem, fs)
	kw := NewWalker(p.l, ks)
	kw.places, kw.names = w.places, w.names
	frames, end := kw.Walk(L)
	w.places, w.names = kw.places, kw.names
	if len(frames) > 0 && fs[0].Flags&kernelLeafPC != 0 && frames[0].FFID == 0 {
		frames[0].Line = p.leafLine(fs[0])
	}
	st := TracebackStack(frames)
	if end == "" {
		end = cut
	}
	if end == "" {
		end = why
	}
	if end != "" {
		act := acts - 1
		if n := len(st.Frames); n > 0 {
			act = st.Frames[n-1].Activation
		}
		st.Frames = append(st.Frames, target.InterpFrame{Function: "[lua: " + end + "]", Method: Method, ParenLocation: true, Activation: max(act, 0)})
	}
	return st.Frames
}

// leafLine is the current line of the innermost frame, a Lua function
// the interpreter ran: from the PC register's low 32 bits the program
// kept (the next instruction's, as a return PC is).
func (p *kernelProc) leafLine(f runtimes.KernelFrame) int {
	w := p.w
	bc, ok := w.ref(f.Code + w.l.fnPC)
	if !ok || bc == 0 {
		return 0
	}
	pc := fullPC(p.l, p.mem, f.Code, f.Off)
	return max(w.line(bc-w.l.protoSize, w.pcOf(bc-w.l.protoSize, pc)), 0)
}

// fullPC is the bytecode PC of Lua function fn whose low 32 bits are
// low: the bits above from the function's bytecode, at or after its
// start; 0 when fn is unreadable.
func fullPC(l *Layout, mem target.Memory, fn uint64, low uint32) uint64 {
	bc, ok := NewWalker(l, mem).ref(fn + l.fnPC)
	if !ok || bc == 0 {
		return 0
	}
	pc := bc&^0xffffffff | uint64(low)
	if pc < bc {
		pc += 1 << 32
	}
	return pc
}

func (p *kernelProc) Close() { p.mem.Close() }

// Where layOut puts the stacks it makes up: addresses no LuaJIT object
// has (GC64 objects are below 2^47 in a process's own mappings; those of
// a 32-bit-reference build are below 2 GiB).
const (
	kernelStackGC64 = 0x3fff_0000_0000
	kernelStack32   = 0xf000_0000
	maxKernelStack  = 1 << 20
)

// kernelStack is a made-up Lua stack, read through to the process for
// everything else.
type kernelStack struct {
	lo  uint64
	b   []byte
	mem target.Memory
}

func (k *kernelStack) ReadMemory(addr uint64, p []byte) error {
	end := addr + uint64(len(p))
	switch {
	case addr >= k.lo && end <= k.lo+uint64(len(k.b)) && end >= addr:
		copy(p, k.b[addr-k.lo:])
		return nil
	case end <= k.lo || addr >= k.lo+uint64(len(k.b)):
		return k.mem.ReadMemory(addr, p)
	}
	return &target.MemoryError{Addr: addr}
}

// layOut makes up the Lua stack the recorded links were on: each link
// below its frame's base, the bases as far apart as the links say (a
// Lua frame's caller's base from its call instruction's operand, read
// from the process's bytecode), and a lua_State whose base is the
// innermost frame's; cut says why the links were not all laid out.
func layOut(l *Layout, mem target.Memory, fs []runtimes.KernelFrame) (*kernelStack, uint64, string) {
	fr2 := uint64(0)
	if l.GC64 {
		fr2 = 1
	}
	top := uint64(kernelStack32)
	if l.GC64 {
		top = kernelStackGC64
	}
	top += maxKernelStack
	bases := make([]uint64, 0, len(fs))
	base, cut := top, ""
	var ins [4]byte
	for _, f := range fs {
		bases = append(bases, base)
		var delta uint64
		if f.Check&3 == 0 {
			pc := f.Check
			if !l.GC64 {
				pc &= 0xffffffff
			}
			if mem.ReadMemory(pc-4, ins[:]) != nil {
				cut = "a return PC is unreadable"
				break
			}
			delta = 8 * (1 + fr2 + uint64(ins[1]))
		} else {
			delta = f.Check &^ 7
		}
		if delta == 0 || top-base+delta > maxKernelStack-64 {
			cut = "a frame link's size is out of the stack"
			break
		}
		base -= delta
	}
	stack := base - 8*(1+fr2)
	lo := stack - 16
	k := &kernelStack{lo: lo, b: make([]byte, top+128-lo), mem: mem}
	le := binary.LittleEndian
	for i, b := range bases {
		f := fs[i]
		if l.GC64 {
			le.PutUint64(k.b[b-16-lo:], f.Code)
			le.PutUint64(k.b[b-8-lo:], f.Check)
		} else {
			le.PutUint32(k.b[b-8-lo:], uint32(f.Code))
			le.PutUint32(k.b[b-4-lo:], uint32(f.Check))
		}
		if f.Check&7 == frameCont && i+1 < len(bases) {
			// The PC a continuation returns to, in its caller's
			// bytecode: the program kept its low 32 bits.
			pc := fullPC(l, mem, fs[i+1].Code, f.Off)
			if l.GC64 && b-24 >= lo {
				le.PutUint64(k.b[b-24-lo:], pc)
			} else if !l.GC64 && b-12 >= lo {
				le.PutUint32(k.b[b-12-lo:], uint32(pc))
			}
		}
	}
	L := top + 16
	le.PutUint64(k.b[L+l.LBase-lo:], top)
	if l.GC64 {
		le.PutUint64(k.b[L+l.LStack-lo:], stack)
	} else {
		le.PutUint32(k.b[L+l.LStack-lo:], uint32(stack))
	}
	return k, L, cut
}

// vmCodeOf finds the VM's code in f: lj_vm_asm_begin's unwind entry
// where the symbol table names it, else (a stripped build) the entry of
// the VM's C frame: the one with a personality routine whose rules start
// by putting the CFA 80 bytes above the stack pointer (CFRAME_SIZE on
// x86-64), the largest if several.
func vmCodeOf(f *elf.File) (vmCode, bool) {
	if f.Machine != elf.EM_X86_64 {
		return vmCode{}, false
	}
	fdes := runtimes.EhFrame(f)
	begin := uint64(0)
	if syms, err := f.Symbols(); err == nil {
		for _, s := range syms {
			if s.Name == "lj_vm_asm_begin" && s.Value != 0 {
				begin = s.Value
			}
		}
	}
	var best vmCode
	for _, fd := range fdes {
		if begin != 0 && (begin < fd.Start || begin >= fd.End) {
			continue
		}
		vc, ok := cframeRules(fd)
		if begin == 0 && (!ok || !strings.Contains(fd.CIE.Augmentation, "P")) {
			continue
		}
		if !ok {
			vc = vmCode{cfa: 80, ret: 72, rbpOff: 64}
		}
		if vc.lo, vc.hi = fd.Start, fd.End; vc.hi-vc.lo > best.hi-best.lo {
			best = vc
		}
	}
	return best, best.hi > best.lo
}

// cframeRules reads the VM's C frame from the first rules of its unwind
// entry: DW_CFA_def_cfa_offset, then DW_CFA_offset of rbp.
func cframeRules(fd *cfi.FDE) (vmCode, bool) {
	b := fd.Instructions
	if len(b) < 4 || b[0] != 0x0e || b[1] >= 0x80 || b[1] < 16 {
		return vmCode{}, false
	}
	cfa := uint32(b[1])
	if b[2] != 0x86 || b[3] >= 0x80 { // DW_CFA_offset r6, a one-byte factored offset
		return vmCode{}, false
	}
	rbp := uint32(b[3]) * uint32(-fd.CIE.DataAlign)
	if rbp > cfa || rbp == 0 {
		return vmCode{}, false
	}
	return vmCode{cfa: cfa, ret: cfa - 8, rbpOff: cfa - rbp}, true
}

// SampleProcess: a user-mode recording does not read Lua frames. The
// sampled thread's base is in a register the stack copy holds only for
// the leaf, or in L->base, stale while the interpreter runs, and which
// thread runs which state is known only from its native stack: the one
// line says so, and what reads them.
func (registered) SampleProcess(pid int, maps []target.Mapping) (runtimes.SampleProcess, error) {
	o, _ := Find(maps, runtimes.ProcessFile(pid))
	if o == nil {
		return nil, nil
	}
	return nil, note(fmt.Errorf("process %d runs LuaJIT (%s): its Lua frames are read by the kernel walk (--unwind-in kernel, root), not from stack copies: native frames only", pid, o.Mapping.Path))
}
