package profiles

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rewindstack/rewind/internal/goruntime"
	"github.com/rewindstack/rewind/internal/jitdump"
	"github.com/rewindstack/rewind/runtimes"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
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
	Kernel func() *symbolize.Kallsyms
	// NoSymbols leaves user locations unnamed (an address in a mapping
	// with its build-id and file offset), for a consumer that symbolizes
	// itself; no symbol table or debug information is read. Stacks are
	// then never Complete: the root functions are not known.
	NoSymbols bool
	// FidelitySamples, when positive, bounds the number of samples the
	// methods after the first walk for the fidelity table: when the first
	// batch (a perf.data file's only one) has more samples, those methods
	// walk every k-th sample, k = ceil(batch/FidelitySamples), and their
	// Fidelity.Every says so. The first method walks every sample.
	FidelitySamples int
	// Fold keeps one Stack per distinct stack instead of one per
	// sample: a sample whose thread (PID, TID, Comm), locations and walk
	// (Complete, End, KernelOnly) are an earlier one's is added to that
	// Stack (its Value summed, its Count incremented; Time stays the
	// first sample's). What the profile keeps then grows with the
	// distinct stacks, not the samples; every output format (pprof,
	// folded, flame graphs, OTLP) is the same. Consumers of single
	// samples (their times) leave it off.
	Fold bool
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
	// Interpreted marks a runtime's interpreted frame (a Python
	// function), which has no address: its one line is the function,
	// file and line the interpreter gives, its module "[runtime]".
	Interpreted bool
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

// Stack is one sample's stack, or several samples' (see Options.Fold).
type Stack struct {
	PID, TID int
	Comm     string
	// Time is the sample's (perf clock), the first one's when samples
	// were folded into the stack.
	Time uint64
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
	// Count is the number of samples the stack stands for: 1, or more
	// when Options.Fold added later samples to it (0, in a Stack made by
	// hand, counts as 1: see Samples).
	Count int
}

// Samples returns the number of samples the stack stands for: its Count,
// at least 1.
func (s *Stack) Samples() int64 {
	return int64(max(s.Count, 1))
}

// Fidelity counts, for one method, the samples whose user stack reaches
// the thread's root. Kernel-only samples are not counted.
type Fidelity struct {
	Method   string
	Samples  int
	Complete int
	// Ends counts the walks' end reasons (unused for KernelFP).
	Ends map[unwind.EndReason]int
	// Reasons counts the end reasons of walks made in the kernel
	// (KernelWalk), by name.
	Reasons map[string]int
	// Frames is the total number of user frames found.
	Frames int
	// Every is k when the method walked only every k-th sample (see
	// Options.FidelitySamples), else 0 or 1.
	Every int
	// Copied counts the samples whose walk was not made again but made
	// from the first method's, because it is provably the same: the CFI
	// only method ("dwarf") where the default chain ("auto") found every
	// frame with CFI, the SFrame only method where the leaf's object has
	// no .sframe (see copyKind in prewalk.go).
	Copied int
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
	// Stacks are one per sample in the order they were added, or one
	// per distinct stack, in the order first seen (Options.Fold).
	Stacks    []Stack
	Fidelity  []Fidelity
	Locations []*Location
	Mappings  []*Mapping
	Lost      uint64
	// KernelOnly counts samples without user registers.
	KernelOnly int
	// InKernelNoUser counts the KernelOnly samples of user processes (ones
	// with mappings): taken in the kernel, with no user stack recorded (a
	// recording without call graphs), unlike kernel threads'.
	InKernelNoUser int
	// AtCopyEdge counts samples whose first method's walk stopped at the
	// end of the copied user stack (a larger stack copy would go on).
	AtCopyEdge int
	// CopyEdgeHint says how to copy more stack, for the fidelity table's
	// line about AtCopyEdge (default: record's --stack-size).
	CopyEdgeHint string
	// OffCPU marks an off-CPU profile: stack values are nanoseconds
	// blocked (see OffCPU), not CPU time.
	OffCPU bool
	// InterpReads says, per runtime, how a recording in user space read
	// its interpreted frames after each sample (Collector.Interp), for
	// the fidelity table.
	InterpReads []runtimes.SampleStats
}

// Samples returns the number of samples of the profile's stacks (more
// than len(Stacks) when they were folded, see Options.Fold).
func (p *Profile) Samples() int64 {
	var n int64
	for i := range p.Stacks {
		n += p.Stacks[i].Samples()
	}
	return n
}

type symKey struct {
	mod  *target.Module
	addr uint64        // object-relative for modules, runtime otherwise
	jit  *jitdump.Code // the jitdump's code at addr at the sample's time
	// jm is the process's mapping of JIT code its own symbols name:
	// processes reuse each other's anonymous addresses for other code.
	// ver is the symbols' version: a perf map read again as it grew
	// (perfMapSyms) names what it did not.
	jm  *target.Mapping
	ver int
}

type locKey struct {
	m    *Mapping
	addr uint64
	jit  *jitdump.Code
	jm   *target.Mapping // as in symKey
	ver  int
}

// JITMapping is the path of a profile's mappings of code a JIT compiler
// generated and named (target.Mapping.JIT).
const JITMapping = "[jit]"

type mapKey struct {
	start, end, off uint64
	path            string
}

// Builder unwinds and symbolizes samples into a profile, batch by batch:
// a recording can hand it the samples it has (Collector.Take) while it
// goes on, so stack copies do not pile up.
type Builder struct {
	now   uint64 // the time of the sample being added (for timed JIT code)
	c     *Collector
	opt   Options
	sym   *symbolize.Symbolizer
	lines map[symKey][]symbolize.Location
	locs  map[locKey]*Location
	kern  map[uint64]*Location
	// interp are the interpreted frames' locations (interp.go).
	interp map[interpKey]*Location
	maps   map[mapKey]*Mapping
	// mapPtr caches maps by the address space's own mapping.
	mapPtr map[*target.Mapping]*Mapping
	prof   *Profile
	// kernelLocs are named at the end, from the kernel symbols that load
	// concurrently with the unwinding.
	kernelLocs []*Location
	ksyms      chan *symbolize.Kallsyms
	prefetched map[*target.Module]bool

	fid      []Fidelity
	kfp      Fidelity
	kwalk    Fidelity // stacks unwound in the kernel (AddStack)
	st       unwind.Stack
	userLocs []*Location

	// stride and seen choose the samples the fidelity methods walk (see
	// fidelityStride); pw and pwAt are the walks of the batch being added
	// and the index of the sample add is at.
	stride int
	seen   int
	pw     *prewalk
	pwAt   int
	pst    unwind.Stack // a prewalked stack (its frames are the workers')
	pstKey uint64
	// pstCopied: the prewalked stack is the first method's walk, copied
	// (see cfiSame).
	pstCopied bool
	stacks    map[uint64]*knownStack
	snap      target.Snapshot
	memos     memos           // per thread and method, for walks made here
	walkers   []*walker       // the prewalk's workers' (see startPrewalk)
	spare     chan chunkArena // see chunkArena

	// folded indexes Profile.Stacks by foldHash (Options.Fold): 1 + the
	// index of the last stack of a hash, and foldNext, per stack, 1 +
	// the one before it of its hash (0: none). foldLocs is the scratch
	// a sample's locations are gathered in before it is known to be a
	// new stack; locSlab, the memory new stacks' locations are copied
	// to (see cloneLocs).
	folded   map[uint64]int32
	foldNext []int32
	foldLocs []*Location
	locSlab  []*Location
	// comms names the threads no record named (perfComm), once each.
	comms map[int]string
	// busy is how long Add took, batches added and samples in them.
	busy    time.Duration
	batches int
	added   int
}

// Busy returns how long Add took in all (unwinding and symbolizing), and
// how many batches and samples were added.
func (b *Builder) Busy() (took time.Duration, batches, samples int) {
	return b.busy, b.batches, b.added
}

// NewBuilder returns a builder for the collector's samples.
func NewBuilder(c *Collector, opt Options) *Builder {
	b := &Builder{
		c: c, opt: opt, sym: opt.Symbolizer,
		lines:      map[symKey][]symbolize.Location{},
		locs:       map[locKey]*Location{},
		kern:       map[uint64]*Location{},
		maps:       map[mapKey]*Mapping{},
		mapPtr:     map[*target.Mapping]*Mapping{},
		prof:       &Profile{},
		prefetched: map[*target.Module]bool{},
		kfp:        Fidelity{Method: KernelFP},
	}
	if b.sym == nil {
		b.sym = &symbolize.Symbolizer{Inlines: true}
	}
	for _, m := range opt.Methods {
		b.fid = append(b.fid, Fidelity{Method: m.Name, Ends: map[unwind.EndReason]int{}})
	}
	return b
}

// Build unwinds and symbolizes every sample the collector holds.
func Build(c *Collector, opt Options) *Profile {
	b := NewBuilder(c, opt)
	b.Add(c.Samples())
	return b.Profile()
}

// Add unwinds and symbolizes samples (taken from the builder's collector),
// and drops their stack copies.
func (b *Builder) Add(samples []*Sample) {
	start := time.Now()
	defer func() {
		b.busy += time.Since(start)
		b.batches++
		b.added += len(samples)
	}()
	if b.ksyms == nil && b.opt.Kernel != nil {
		for _, s := range samples {
			if len(s.Kernel) > 0 {
				// Reading kallsyms takes as long as unwinding
				// thousands of samples: do it meanwhile.
				b.ksyms = make(chan *symbolize.Kallsyms, 1)
				go func() { b.ksyms <- b.opt.Kernel() }()
				break
			}
		}
	}
	b.prefetch(samples)
	if !b.opt.Fold {
		b.prof.Stacks = slices.Grow(b.prof.Stacks, len(samples))
	}
	b.pw = b.startPrewalk(samples)
	for i, s := range samples {
		b.pwAt = i
		b.add(s)
		if s.Stack != nil {
			// (A sample without registers has no stack copy; its
			// chunk may still be walked: it is not written.)
			s.Stack = nil
		}
		s.Extra = nil
	}
	if len(b.pw.chunks) > 0 {
		b.pw.release(len(b.pw.chunks))
	}
	b.pst.Frames = nil
	b.pw = nil
}

func (b *Builder) add(s *Sample) {
	b.now = s.Time
	out := Stack{PID: s.PID, TID: s.TID, Comm: s.comm, Time: s.Time, Value: int64(s.Period), Count: max(s.walkCount, 1)}
	if out.Comm == "" {
		out.Comm = b.perfComm(s.PID, s.TID)
	}
	if b.opt.Fold {
		// Gathered in the scratch: most samples' stacks are known.
		out.Locations = b.foldLocs[:0]
	}
	for _, ip := range s.Kernel {
		out.Locations = append(out.Locations, b.kernelLoc(ip))
	}
	if !s.HasRegs && len(s.UserFP) > 0 {
		// A -g recording: the kernel's frame-pointer walk is all there
		// is.
		locs := b.fpLocs(s)
		out.Locations = append(out.Locations, locs...)
		out.Complete = reachesRoot(locs)
		b.keep(&out, false)
		return
	}
	if !s.HasRegs {
		out.KernelOnly = true
		b.prof.KernelOnly++
		if s.space != nil && len(s.space.maps) > 0 {
			b.prof.InKernelNoUser++
		}
		b.keep(&out, false)
		return
	}
	sp := s.sp
	firstOK := false
	shared := false
	for i := range b.opt.Methods {
		st := b.walk(s, i)
		if st == nil {
			continue // a fidelity method that skips this sample
		}
		var locs []*Location
		var ok bool
		if i > 0 && st == &b.pst && b.pstCopied && b.pw.copy[i] == copyCFI {
			// The first method's walk: its outermost frames, which
			// are all stackLocs would look at, reach the root as the
			// first method's did.
			ok = firstOK
		} else {
			locs, ok = b.stackLocs(st, i)
		}
		if i == 0 {
			firstOK = ok
		}
		f := &b.fid[i]
		f.Samples++
		f.Frames += len(st.Frames)
		f.Ends[st.End]++
		if ok {
			f.Complete++
		}
		if i > 0 && b.stride > 1 {
			f.Every = b.stride
		}
		if st == &b.pst && b.pstCopied {
			f.Copied++
		}
		if i == 0 {
			if !ok && atCopyEdge(st, sp, len(s.Stack), s.stackFull) {
				b.prof.AtCopyEdge++
			}
			interp := len(s.Interp) > 0
			if interp {
				// Frames read from the process as the sample was
				// read (Collector.Interp): a slice of the sample's own.
				locs = b.spliceInterp(locs, frameSPs(st), s.Interp)
			}
			if len(out.Locations) == 0 && !interp {
				out.Locations = locs // shared by the samples with this stack
				shared = true
			} else {
				out.Locations = append(out.Locations, locs...)
			}
			out.Complete = ok
			out.End = st.End
		}
	}
	if len(s.UserFP) > 0 {
		b.fpLocs(s)
	}
	b.keep(&out, shared)
}

// keep adds a sample's stack to the profile: as a Stack of its own, or,
// with Options.Fold, to the earlier Stack it equals. shared says its
// Locations are stackLocs' (kept by the builder); else, with Fold, they
// are in the scratch, and copied when the stack is new.
func (b *Builder) keep(out *Stack, shared bool) {
	if !b.opt.Fold {
		b.prof.Stacks = append(b.prof.Stacks, *out)
		return
	}
	if !shared {
		b.foldLocs = out.Locations[:0] // (grown by the appends, maybe)
	}
	h := foldHash(out)
	for i := b.folded[h]; i != 0; i = b.foldNext[i-1] {
		if st := &b.prof.Stacks[i-1]; sameFold(st, out) {
			st.Value += out.Value
			st.Count += max(out.Count, 1)
			return
		}
	}
	if !shared {
		out.Locations = b.cloneLocs(out.Locations)
	}
	if b.folded == nil {
		b.folded = map[uint64]int32{}
	}
	b.prof.Stacks = append(b.prof.Stacks, *out)
	b.foldNext = append(b.foldNext, b.folded[h])
	b.folded[h] = int32(len(b.prof.Stacks))
}

// locSlab is how many location pointers cloneLocs allocates at once.
const locSlab = 32 << 10

// cloneLocs copies locs into memory carved from a slab: one allocation
// per distinct stack, and its size class's slack, were 8.5 MB of a 2 GB
// recording's report.
func (b *Builder) cloneLocs(locs []*Location) []*Location {
	if len(locs) == 0 {
		return nil
	}
	if len(b.locSlab) < len(locs) {
		b.locSlab = make([]*Location, max(locSlab, len(locs)))
	}
	out := b.locSlab[:len(locs):len(locs)]
	b.locSlab = b.locSlab[len(locs):]
	copy(out, locs)
	return out
}

// foldHash hashes what two samples must share to be folded into one
// Stack (see sameFold). Folded stacks are found by it, and compared:
// keys holding all of it (a string of the location IDs) took 25 MB for
// the 209,126 distinct stacks of a 2 GB system-wide recording.
func foldHash(s *Stack) uint64 {
	h := uint64(14695981039346656037)
	mix := func(v uint64) { h = (h ^ v) * 1099511628211 }
	mix(uint64(s.PID))
	mix(uint64(s.TID))
	mix(foldFlags(s))
	mix(uint64(len(s.Comm)))
	for i := 0; i < len(s.Comm); i++ {
		mix(uint64(s.Comm[i]))
	}
	for _, l := range s.Locations {
		mix(l.ID)
	}
	return h
}

// foldFlags packs a stack's end, completeness and kernel-only flag.
func foldFlags(s *Stack) uint64 {
	flags := uint64(s.End) << 2
	if s.Complete {
		flags |= 1
	}
	if s.KernelOnly {
		flags |= 2
	}
	return flags
}

// sameFold reports whether two samples are folded into one Stack: they
// share all but the time and value.
func sameFold(a, b *Stack) bool {
	if a.PID != b.PID || a.TID != b.TID || foldFlags(a) != foldFlags(b) || a.Comm != b.Comm || len(a.Locations) != len(b.Locations) {
		return false
	}
	for i, l := range a.Locations {
		// (Location IDs are the builder's, one per Location.)
		if l.ID != b.Locations[i].ID {
			return false
		}
	}
	return true
}

// fpLocs symbolizes the kernel's frame-pointer walk of a sample's user
// stack and counts it in the KernelFP fidelity.
func (b *Builder) fpLocs(s *Sample) []*Location {
	space := b.c.addressSpace(s.space)
	b.userLocs = b.userLocs[:0]
	for j, pc := range s.UserFP {
		fr := unwind.Frame{PC: pc, Exact: j == 0}
		fr.Map = space.Find(fr.LookupPC())
		b.userLocs = append(b.userLocs, b.userLoc(&fr))
	}
	f := &b.kfp
	if s.walkEnd != "" {
		// Unwound in the kernel (AddStack): weighted by its count.
		if b.kwalk.Reasons == nil {
			b.kwalk = Fidelity{Method: KernelWalk, Reasons: map[string]int{}}
		}
		f = &b.kwalk
		f.Reasons[s.walkEnd] += max(s.walkCount, 1)
	}
	n := max(s.walkCount, 1)
	f.Samples += n
	f.Frames += n * len(b.userLocs)
	if reachesRoot(b.userLocs) {
		f.Complete += n
	}
	if len(s.Interp) > 0 {
		b.userLocs = b.spliceInterp(b.userLocs, nil, s.Interp)
	}
	return b.userLocs
}

// Profile finishes the profile of the samples added so far.
func (b *Builder) Profile() *Profile {
	b.prof.Lost = b.c.Lost
	b.prof.Fidelity = append([]Fidelity(nil), b.fid...)
	if b.kfp.Samples > 0 {
		b.prof.Fidelity = append(b.prof.Fidelity, b.kfp)
	}
	if b.kwalk.Samples > 0 {
		b.prof.Fidelity = append(b.prof.Fidelity, b.kwalk)
	}
	if b.ksyms != nil {
		k := <-b.ksyms
		b.ksyms <- k
		for _, l := range b.kernelLocs {
			if name, off, ok := k.Lookup(l.Addr); ok {
				l.Lines[0].Function, l.Lines[0].Offset = name, off
			}
		}
	}
	return b.prof
}

// Release drops what the builder keeps to build later batches faster (its
// indexes of locations, symbols and stacks, the walk memos): for a
// builder that is done, whose Profile is written next. The Profile stays
// valid; the builder must not be used again. On a 2 GB system-wide
// recording they were a fifth of what the report held when its profile
// was written.
func (b *Builder) Release() {
	b.lines, b.locs, b.kern, b.maps, b.mapPtr = nil, nil, nil, nil, nil
	b.stacks, b.folded, b.comms = nil, nil, nil
	b.memos, b.walkers, b.spare = memos{}, nil, nil
	b.foldLocs, b.userLocs, b.foldNext, b.locSlab = nil, nil, nil, nil
	b.st, b.pst, b.snap = unwind.Stack{}, unwind.Stack{}, target.Snapshot{}
	b.prefetched = nil
}

func (b *Builder) mapping(m *target.Mapping) *Mapping {
	// By pointer first: hashing the path for every frame showed in
	// profiles of rewind report.
	if mm := b.mapPtr[m]; mm != nil {
		return mm
	}
	path := m.Path
	if m.JIT != nil && namesJIT(m.JIT) {
		// Code a JIT compiler named (its perf map, its jitdump): "[jit]"
		// in pprof, not anonymous memory ("", perf's "//anon").
		path = JITMapping
	}
	k := mapKey{m.Start, m.End, m.Offset, path}
	if mm := b.maps[k]; mm != nil {
		b.mapPtr[m] = mm
		return mm
	}
	mm := &Mapping{ID: uint64(len(b.prof.Mappings) + 1), Start: m.Start, End: m.End, Offset: m.Offset, Path: path}
	if m.Module != nil && m.Module.File != nil {
		mm.BuildID = m.Module.File.BuildIDHex()
	}
	b.maps[k] = mm
	b.mapPtr[m] = mm
	b.prof.Mappings = append(b.prof.Mappings, mm)
	return mm
}

func (b *Builder) newLoc(addr uint64, m *Mapping, kernel bool, lines []symbolize.Location) *Location {
	l := &Location{ID: uint64(len(b.prof.Locations) + 1), Addr: addr, Mapping: m, Kernel: kernel, Lines: lines}
	b.prof.Locations = append(b.prof.Locations, l)
	return l
}

// userLoc returns the location of a user frame, in the mapping the walk
// found it in.
func (b *Builder) userLoc(f *unwind.Frame) *Location {
	pc := f.LookupPC()
	um := f.Map
	var m *Mapping
	if um != nil {
		m = b.mapping(um)
	}
	var code *jitdump.Code
	var jm *target.Mapping
	ver := 0
	if um != nil && um.JIT != nil {
		jm, ver = um, jitVersion(um.JIT)
		code, um = jitAt(um, pc, b.now) // (jitdump code by the sample's time)
	}
	lk := locKey{m, pc, code, jm, ver}
	if l := b.locs[lk]; l != nil {
		return l
	}
	k := symKey{addr: pc, jit: code, jm: jm, ver: ver}
	if um != nil && um.Module != nil && code == nil {
		k = symKey{mod: um.Module, addr: pc - um.Bias}
	}
	lines, ok := b.lines[k]
	if !ok {
		if b.opt.NoSymbols {
			lines = []symbolize.Location{{}}
		} else {
			lines = b.sym.Frame(um, f.PC, f.Exact)
		}
		b.lines[k] = lines
	}
	l := b.newLoc(pc, m, false, lines)
	b.locs[lk] = l
	return l
}

func (b *Builder) kernelLoc(ip uint64) *Location {
	if l := b.kern[ip]; l != nil {
		return l
	}
	l := b.newLoc(ip, nil, true, []symbolize.Location{{Module: "[kernel.kallsyms]"}})
	b.kern[ip] = l
	b.kernelLocs = append(b.kernelLocs, l)
	return l
}

// reachesRoot reports whether one of the outermost three user frames is a
// thread root function (goruntime.IsRoot).
func reachesRoot(locs []*Location) bool {
	if n := len(locs); n > 0 && goStackEnd(locs[n-1].Name()) {
		return true
	}
	for i := len(locs) - 1; i >= 0 && i >= len(locs)-3; i-- {
		for _, ln := range locs[i].Lines {
			if goruntime.IsRoot(ln.Function) {
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
func (b *Builder) prefetch(samples []*Sample) {
	if b.opt.NoSymbols {
		return
	}
	type job struct {
		space *target.AddressSpace
		pc    uint64
	}
	mods := b.prefetched
	var jobs []job
	for _, s := range samples {
		if s.space == nil || !s.HasRegs {
			continue
		}
		pc := s.pc
		space := b.c.addressSpace(s.space)
		if m := space.Find(pc); m != nil && m.Module != nil && m.Module.File != nil && !mods[m.Module] && b.c.vdso != m.Module {
			mods[m.Module] = true
			jobs = append(jobs, job{space, pc})
		}
	}
	if len(jobs) == 0 {
		return
	}
	go func() {
		for _, j := range jobs {
			b.sym.Frame(j.space.Find(j.pc), j.pc, true)
		}
	}()
}

// perfComm returns perfComm(pid, tid), made once per thread.
func (b *Builder) perfComm(pid, tid int) string {
	if pid == 0 {
		return perfComm(pid, tid)
	}
	if c, ok := b.comms[tid]; ok {
		return c
	}
	if b.comms == nil {
		b.comms = map[int]string{}
	}
	c := perfComm(pid, tid)
	b.comms[tid] = c
	return c
}

// perfComm names a thread whose command no record gave as perf does: the
// idle task (PID 0) is "swapper", any other ":TID", the TID read as the
// kernel's signed pid_t (a sample without a task says ":-1", as perf does).
func perfComm(pid, tid int) string {
	if pid == 0 {
		return "swapper"
	}
	return ":" + strconv.Itoa(int(int32(tid)))
}

// copyEdgeSlack is how close to the end of the stack copy a walk's last
// frame must be for the walk to count as stopped by the copy's size: the
// next frame's saved registers lie within a few words above it.
const copyEdgeSlack = 512

// atCopyEdge reports whether a walk that did not reach the root stopped
// because the stack copy (size bytes at sp) ended: it could not read
// memory, or found no sane frame, right at the copy's end; or, when the
// copy was full (the stack went on beyond it), it could not read memory
// for the caller of a frame in the copy: a frame larger than what was
// left of the copy (a Go function with a large array on its stack, say).
func atCopyEdge(st *unwind.Stack, sp uint64, size int, full bool) bool {
	if size == 0 || len(st.Frames) == 0 {
		return false
	}
	switch st.End {
	case unwind.EndUnreadable, unwind.EndBadFP, unwind.EndNoProgress, unwind.EndRAUndefined:
	default:
		return false
	}
	last := st.Frames[len(st.Frames)-1].SP
	if full && st.End == unwind.EndUnreadable && last >= sp && last < sp+uint64(size) {
		return true
	}
	return last != 0 && last+copyEdgeSlack >= sp+uint64(size)
}

// frameSPs are the stack pointers of a walk's frames.
func frameSPs(st *unwind.Stack) []uint64 {
	out := make([]uint64, len(st.Frames))
	for i := range st.Frames {
		out[i] = st.Frames[i].SP
	}
	return out
}
