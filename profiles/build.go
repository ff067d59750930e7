package profiles

import (
	"strings"

	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/unwind"
)

// Method is a named unwinder ("auto", "dwarf", "sframe", "fp").
type Method struct {
	Name     string
	Unwinder *unwind.Unwinder
}

// KernelFP is the Fidelity.Method name of the kernel's own frame-pointer
// walk of the user stack (the callchain perf_event_open records).
const KernelFP = "kernel-fp"

// Options control Build.
type Options struct {
	// Methods are the unwinders to run: the first produces the profile's
	// stacks, every one gets a fidelity line.
	Methods []Method
	// Symbolizer names user addresses (nil: a default one with inlines).
	Symbolizer *symbolize.Symbolizer
	// Kernel returns the kernel symbols, called once and only when a
	// sample has kernel frames (nil, or a nil result: kernel frames are
	// addresses).
	Kernel func() *Kallsyms
}

// Mapping is one mapped object range that frames were found in.
type Mapping struct {
	ID                 uint64
	Start, End, Offset uint64
	Path               string
	BuildID            string
}

// Location is one unique code address of the profile.
type Location struct {
	ID uint64
	// Addr is the lookup address: the PC for the sampled frame, the
	// return address minus one for callers.
	Addr    uint64
	Kernel  bool
	Mapping *Mapping // nil for kernel and unmapped addresses
	// Lines are the function activations at Addr, innermost first: the
	// inlined calls, then the physical function (always present, with an
	// empty Function when unknown).
	Lines []symbolize.Location
}

// Name returns the location's physical function name, or a placeholder
// naming the module ("[unknown] libfoo.so") when there is none.
func (l *Location) Name() string {
	if n := l.Lines[len(l.Lines)-1].Function; n != "" {
		return n
	}
	if l.Kernel {
		return "[kernel]"
	}
	if l.Mapping != nil && l.Mapping.Path != "" {
		p := l.Mapping.Path
		if i := strings.LastIndexByte(p, '/'); i >= 0 {
			p = p[i+1:]
		}
		return "[unknown] " + p
	}
	return "[unknown]"
}

// Stack is one sample's stack.
type Stack struct {
	PID, TID int
	Comm     string
	Time     uint64
	// Locations are leaf first: kernel frames, then user frames.
	Locations []*Location
	// Value is the sample's period (nanoseconds of cpu-clock).
	Value int64
	// Complete reports whether the user stack reaches its thread's root.
	Complete bool
	// End says why the user walk stopped.
	End unwind.EndReason
	// KernelOnly marks samples without user registers (kernel threads).
	KernelOnly bool
}

// Fidelity counts, for one method, the samples whose user stack reaches
// the thread's root. Kernel-only samples are not counted.
type Fidelity struct {
	Method   string
	Samples  int
	Complete int
	// Ends counts the walks' end reasons (unused for KernelFP).
	Ends map[unwind.EndReason]int
	// Frames is the total number of user frames found.
	Frames int
}

// Percent returns the share of complete stacks in percent.
func (f *Fidelity) Percent() float64 {
	if f.Samples == 0 {
		return 0
	}
	return 100 * float64(f.Complete) / float64(f.Samples)
}

// Profile is the result of Build.
type Profile struct {
	Stacks    []Stack
	Fidelity  []Fidelity
	Locations []*Location
	Mappings  []*Mapping
	Lost      uint64
	// KernelOnly counts samples without user registers.
	KernelOnly int
}

type symKey struct {
	mod  *unwind.Module
	addr uint64 // object-relative for modules, runtime otherwise
}

type locKey struct {
	m    *Mapping
	addr uint64
}

type mapKey struct {
	start, end, off uint64
	path            string
}

type builder struct {
	c     *Collector
	opt   Options
	sym   *symbolize.Symbolizer
	lines map[symKey][]symbolize.Location
	locs  map[locKey]*Location
	kern  map[uint64]*Location
	maps  map[mapKey]*Mapping
	prof  *Profile
	// kernelLocs are resolved at the end, once the kernel symbols that
	// load concurrently with the unwinding are there.
	kernelLocs []*Location
}

// Build unwinds and symbolizes every sample the collector holds.
func Build(c *Collector, opt Options) *Profile {
	b := &builder{
		c: c, opt: opt, sym: opt.Symbolizer,
		lines: map[symKey][]symbolize.Location{},
		locs:  map[locKey]*Location{},
		kern:  map[uint64]*Location{},
		maps:  map[mapKey]*Mapping{},
		prof:  &Profile{Lost: c.Lost},
	}
	if b.sym == nil {
		b.sym = &symbolize.Symbolizer{Inlines: true}
	}
	samples := c.Samples()
	// Reading kallsyms takes as long as unwinding thousands of samples:
	// do it meanwhile.
	ksyms := make(chan *Kallsyms, 1)
	go func() {
		for _, s := range samples {
			if len(s.Kernel) > 0 && opt.Kernel != nil {
				ksyms <- opt.Kernel()
				return
			}
		}
		ksyms <- nil
	}()
	b.prefetch(samples)
	fid := make([]Fidelity, len(opt.Methods))
	for i, m := range opt.Methods {
		fid[i] = Fidelity{Method: m.Name, Ends: map[unwind.EndReason]int{}}
	}
	kfp := Fidelity{Method: KernelFP}
	var st unwind.Stack
	var userLocs []*Location
	for _, s := range samples {
		out := Stack{PID: s.PID, TID: s.TID, Comm: c.Comm(s.TID), Time: s.Time, Value: int64(s.Period)}
		for _, ip := range s.Kernel {
			out.Locations = append(out.Locations, b.kernelLoc(ip))
		}
		if !s.HasRegs && len(s.UserFP) > 0 {
			// A -g recording: the kernel's frame-pointer walk is all
			// there is.
			space := c.addressSpace(s.space)
			userLocs = userLocs[:0]
			for j, pc := range s.UserFP {
				fr := unwind.Frame{PC: pc, Exact: j == 0}
				userLocs = append(userLocs, b.userLoc(space, &fr))
			}
			out.Locations = append(out.Locations, userLocs...)
			out.Complete = reachesRoot(userLocs)
			kfp.Samples++
			kfp.Frames += len(userLocs)
			if out.Complete {
				kfp.Complete++
			}
			b.prof.Stacks = append(b.prof.Stacks, out)
			continue
		}
		if !s.HasRegs {
			out.KernelOnly = true
			b.prof.KernelOnly++
			b.prof.Stacks = append(b.prof.Stacks, out)
			continue
		}
		space := c.addressSpace(s.space)
		sp, _ := s.Regs.SP()
		mem := &unwind.Snapshot{Regions: []unwind.Region{{Addr: sp, Data: s.Stack}}}
		for i, m := range opt.Methods {
			m.Unwinder.WalkInto(&st, s.Regs, mem, space)
			userLocs = userLocs[:0]
			for j := range st.Frames {
				userLocs = append(userLocs, b.userLoc(space, &st.Frames[j]))
			}
			ok := reachesRoot(userLocs)
			f := &fid[i]
			f.Samples++
			f.Frames += len(userLocs)
			f.Ends[st.End]++
			if ok {
				f.Complete++
			}
			if i == 0 {
				out.Locations = append(out.Locations, userLocs...)
				out.Complete = ok
				out.End = st.End
			}
		}
		if len(s.UserFP) > 0 {
			userLocs = userLocs[:0]
			for j, pc := range s.UserFP {
				fr := unwind.Frame{PC: pc, Exact: j == 0}
				userLocs = append(userLocs, b.userLoc(space, &fr))
			}
			kfp.Samples++
			kfp.Frames += len(userLocs)
			if reachesRoot(userLocs) {
				kfp.Complete++
			}
		}
		b.prof.Stacks = append(b.prof.Stacks, out)
	}
	if kfp.Samples > 0 {
		fid = append(fid, kfp)
	}
	b.prof.Fidelity = fid
	k := <-ksyms
	for _, l := range b.kernelLocs {
		if name, off, ok := k.Lookup(l.Addr); ok {
			l.Lines[0].Function, l.Lines[0].Offset = name, off
		}
	}
	return b.prof
}

func (b *builder) mapping(m *unwind.Mapping) *Mapping {
	k := mapKey{m.Start, m.End, m.Offset, m.Path}
	if mm := b.maps[k]; mm != nil {
		return mm
	}
	mm := &Mapping{ID: uint64(len(b.prof.Mappings) + 1), Start: m.Start, End: m.End, Offset: m.Offset, Path: m.Path}
	if m.Module != nil && m.Module.File != nil {
		mm.BuildID = m.Module.File.BuildIDHex()
	}
	b.maps[k] = mm
	b.prof.Mappings = append(b.prof.Mappings, mm)
	return mm
}

func (b *builder) newLoc(addr uint64, m *Mapping, kernel bool, lines []symbolize.Location) *Location {
	l := &Location{ID: uint64(len(b.prof.Locations) + 1), Addr: addr, Mapping: m, Kernel: kernel, Lines: lines}
	b.prof.Locations = append(b.prof.Locations, l)
	return l
}

func (b *builder) userLoc(space *unwind.AddressSpace, f *unwind.Frame) *Location {
	pc := f.LookupPC()
	um := space.Find(pc)
	var m *Mapping
	if um != nil {
		m = b.mapping(um)
	}
	if l := b.locs[locKey{m, pc}]; l != nil {
		return l
	}
	k := symKey{addr: pc}
	if um != nil && um.Module != nil {
		k = symKey{mod: um.Module, addr: pc - um.Bias}
	}
	lines, ok := b.lines[k]
	if !ok {
		lines = b.sym.Frame(space, f)
		b.lines[k] = lines
	}
	l := b.newLoc(pc, m, false, lines)
	b.locs[locKey{m, pc}] = l
	return l
}

func (b *builder) kernelLoc(ip uint64) *Location {
	if l := b.kern[ip]; l != nil {
		return l
	}
	l := b.newLoc(ip, nil, true, []symbolize.Location{{Module: "[kernel.kallsyms]"}})
	b.kern[ip] = l
	b.kernelLocs = append(b.kernelLocs, l)
	return l
}

// rootFunctions are the functions a complete user stack ends in: the
// program entry, glibc's thread entry points, and Go's goroutine root.
var rootFunctions = map[string]bool{
	"_start": true, "__libc_start_main": true, "__libc_start_main_impl": true, "__libc_start_call_main": true,
	"start_thread": true, "clone3": true, "__clone3": true, "clone": true, "__clone": true,
	"runtime.goexit": true, "runtime.goexit.abi0": true, "runtime.mstart": true, "runtime.rt0_go": true,
}

// reachesRoot reports whether one of the outermost three user frames is a
// thread root function.
func reachesRoot(locs []*Location) bool {
	for i := len(locs) - 1; i >= 0 && i >= len(locs)-3; i-- {
		for _, ln := range locs[i].Lines {
			name := ln.Function
			if at := strings.IndexByte(name, '@'); at > 0 {
				name = name[:at]
			}
			if rootFunctions[name] {
				return true
			}
		}
	}
	return false
}

// prefetch loads the symbol and debug information of the objects the
// samples' leaf frames are in, in the background: loading a library's
// DWARF (for inlined calls and lines) costs as much as unwinding thousands
// of samples, and overlaps with it when another core is free.
func (b *builder) prefetch(samples []*Sample) {
	type job struct {
		space *unwind.AddressSpace
		pc    uint64
	}
	mods := map[*unwind.Module]bool{}
	var jobs []job
	for _, s := range samples {
		if s.space == nil || !s.HasRegs {
			continue
		}
		pc, _ := s.Regs.PC()
		space := b.c.addressSpace(s.space)
		if m := space.Find(pc); m != nil && m.Module != nil && m.Module.File != nil && !mods[m.Module] {
			mods[m.Module] = true
			jobs = append(jobs, job{space, pc})
		}
	}
	go func() {
		for _, j := range jobs {
			b.sym.Frame(j.space, &unwind.Frame{PC: j.pc, Exact: true})
		}
	}()
}
