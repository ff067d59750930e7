// Package profiles turns perf samples into symbolized stacks: it tracks
// each process's mappings from MMAP2/COMM/FORK records (live or from a
// perf.data file), unwinds every sample's user stack from the copy the
// kernel took (registers + stack bytes at the stack pointer) with rewind's
// unwinders, adds the kernel frames of the kernel's callchain, symbolizes
// each unique address once, measures how many stacks reach their thread's
// root per unwind method, and writes pprof and folded-stack files.
package profiles

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rewindstack/rewind/internal/jitdump"
	"github.com/rewindstack/rewind/internal/perfmap"
	"github.com/rewindstack/rewind/internal/procmaps"
	"github.com/rewindstack/rewind/perfdata"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/target"
)

// Sample is one sample, copied out of its record.
type Sample struct {
	PID, TID int
	Time     uint64
	Period   uint64
	// HasRegs is false for samples without user registers (a kernel
	// thread); such samples have kernel frames only.
	HasRegs bool
	// Stack is the copy of user memory at the user stack pointer.
	Stack []byte
	// Kernel is the kernel part of the callchain, leaf first.
	Kernel []uint64
	// UserFP is the kernel's frame-pointer walk of the user stack, leaf
	// first (empty when the event excluded it).
	UserFP []uint64
	// IP is the sampled instruction pointer (user or kernel).
	IP uint64

	// stackFull: the kernel copied all the stack the event asked for, so
	// the thread's stack went on beyond the copy.
	stackFull bool
	// The user registers are kept as the record holds them (taken with
	// regMask, see Regs): a regs.Regs is 280 bytes, two thirds of a
	// Sample, and the 3.4 MB of Samples a 7,670-sample perf.data file
	// took were all page faults (the heap is not collected during a
	// report).
	arch    regs.Arch
	regMask uint64
	rawRegs []byte
	pc, sp  uint64 // of the registers, for what needs no others
	space   *space
	comm    string
	// walkEnd is, for a stack unwound in the kernel (AddStack), why its
	// walk stopped; "" for the others.
	walkEnd string
	// walkCount is how many events AddStack's stack stands for.
	walkCount int
	// Interp are interpreted frames the kernel walk found (CPython's),
	// or Collector.Interp read as the sample was read, by runtime, innermost first, spliced above the native frames of
	// the activations that ran them (interp.go).
	Interp []target.InterpStack
	// Extra is memory copied at the sample's time beside the stack
	// (Collector.Memory), read by its walk as the stack copy is.
	Extra []target.Region
}

// bytes is the size of the sample's copies of memory.
func (s *Sample) bytes() int {
	n := len(s.Stack)
	for _, r := range s.Extra {
		n += len(r.Data)
	}
	return n
}

// regions appends the memory the sample's walk reads to dst: its stack
// copy, then Extra.
func (s *Sample) regions(dst []target.Region) []target.Region {
	dst = append(dst, target.Region{Addr: s.sp, Data: s.Stack})
	return append(dst, s.Extra...)
}

// space is one generation of a process's address space: the mappings as
// they were between two mapping changes.
type space struct {
	pid   int
	maps  []target.Mapping
	built *target.AddressSpace
}

// process tracks one process's current mappings and name.
type process struct {
	pid  int
	comm string
	cur  *space
}

// event is a side-band record kept for replay in time order.
type event struct {
	time uint64
	seq  int
	kind uint32
	pid  int
	tid  int
	ppid int
	str  string
	mmap *target.Mapping // by pointer: events are many, mappings few
	exec bool
	smp  *Sample
}

// Collector gathers records (in any order within a recording) and turns
// them into samples with their address spaces. It copies what it keeps, so
// records may point into ring buffers.
type Collector struct {
	// Arch is the architecture the samples' registers are in.
	Arch regs.Arch
	// Objects opens the mapped files (shared between processes).
	Objects *target.Objects
	// Lost counts records the kernel could not write.
	Lost uint64
	// Warn receives warnings (may be nil).
	Warn func(string)
	// Borrow keeps the samples' stack bytes in the records' memory
	// instead of copying them: set it when that memory outlives the
	// collector's use (an open perf.data file), never for ring buffers.
	// Records that were decompressed (perf record -z) are copied anyway.
	Borrow bool
	// Memory, when set, adds to each sample memory copied beside its
	// stack (see SampleMemory).
	Memory SampleMemory
	// Interp, when set, gives each sample the interpreted frames read
	// from its process as the sample is read (see SampleInterp).
	Interp SampleInterp

	events       []event
	comms        map[int]string
	procs        map[int]*process
	pendingBytes int
	lastTime     uint64
	vdso         *target.Module
	vdsoErr      error
	vdsoID       string // build-id a perf.data file recorded for [vdso]
	arena        []byte // stack copies are carved from large chunks
	sampleSlab   []Sample
	freeSamples  []*Sample // see recycle
	seq          int
	perfMaps     map[int]target.JITSymbols // JIT symbols by process, nil when none
	// clock is 1 while every sample was stamped with CLOCK_MONOTONIC
	// (perf record -k mono), the clock of jitdumps, -1 once one was not.
	clock int8
}

// SampleMemory is memory a recorder copied at a sample's time beside the
// stack copy (internal/goassist: a Go thread's goroutine, on g0), which
// the sample's walk reads as it reads the stack copy.
type SampleMemory interface {
	// SampleMemory returns the memory copied for the sample of thread
	// tid of process pid taken at time t (the sample's own time) with
	// user stack pointer sp, nil when none was. It is called once per sample, as it is read; the
	// regions' bytes must stay unchanged afterwards.
	SampleMemory(pid, tid int, t, sp uint64) []target.Region
	// Exec says that process pid ran a new program.
	Exec(pid int)
}

// SampleInterp reads a sampled thread's interpreted frames from its
// process when its sample is read (runtimes.Sampling: a recording in
// user space, whose stack copies hold no interpreter frames), to be
// spliced above the native frames of the activations that run them, as
// the kernel walk's are.
type SampleInterp interface {
	// SampleInterp reads thread tid of process pid, sampled at time t.
	SampleInterp(pid, tid int, t uint64) []target.InterpStack
	// Exec says that process pid ran a new program, or is a new
	// process (forked, maybe under a reused process id): what was
	// found in it is stale.
	Exec(pid int)
}

// arenaChunk is the size of the chunks stack copies are kept in: one
// allocation per few hundred samples instead of one per sample keeps the
// recorder's garbage collection (and so its overhead) low.
const arenaChunk = 4 << 20

// keep copies b into the arena.
func (c *Collector) keep(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	if cap(c.arena)-len(c.arena) < len(b) {
		c.arena = make([]byte, 0, max(arenaChunk, len(b)))
	}
	n := len(c.arena)
	c.arena = append(c.arena, b...)
	return c.arena[n:len(c.arena):len(c.arena)]
}

// keepRegs copies register values into the arena as a record holds them.
func (c *Collector) keepRegs(vals []uint64) []byte {
	if len(vals) == 0 {
		return nil
	}
	n := 8 * len(vals)
	if cap(c.arena)-len(c.arena) < n {
		c.arena = make([]byte, 0, max(arenaChunk, n))
	}
	at := len(c.arena)
	for _, v := range vals {
		c.arena = binary.LittleEndian.AppendUint64(c.arena, v)
	}
	return c.arena[at:len(c.arena):len(c.arena)]
}

// Regs returns the sample's user registers (empty without HasRegs).
func (s *Sample) Regs() regs.Regs {
	r, _ := regs.FromPerfRaw(s.arch, s.regMask, s.rawRegs)
	return r
}

// NewCollector returns a collector for samples of arch.
func NewCollector(arch regs.Arch) *Collector {
	return &Collector{Arch: arch, Objects: &target.Objects{}, comms: map[int]string{}, procs: map[int]*process{}}
}

// ExpectVDSO tells the collector the build-id a perf.data file lists for
// [vdso]: rewind uses its own process's vDSO image (the kernel's), and only
// when the build-ids match.
func (c *Collector) ExpectVDSO(buildID []byte) { c.vdsoID = fmt.Sprintf("%x", buildID) }

func (c *Collector) add(e event) {
	c.seq++
	e.seq = c.seq
	c.events = append(c.events, e)
	c.lastTime = max(c.lastTime, e.time)
}

// Add records one decoded record.
func (c *Collector) Add(rec *perfdata.Record) { c.AddSample(rec) }

// AddSample records one decoded record like Add and returns the sample it
// made of a sample record (nil for other records). The caller may change
// the sample's Period until the sample is taken (rewind agent's off-CPU
// profile weights a switch-out by the time until the switch-in).
func (c *Collector) AddSample(rec *perfdata.Record) *Sample {
	t := rec.ID.Time
	switch rec.Type {
	case perfdata.RecordSample:
		s := rec.Sample
		out := c.newSample()
		// The kernel's pid and tid are signed: a task that is exiting
		// (its thread already unhashed) is sampled with tid -1, which
		// perf prints as -1 and names ":-1".
		*out = Sample{PID: int(int32(s.PID)), TID: int(int32(s.TID)), Time: s.Time, Period: s.Period, IP: s.IP,
			Kernel: out.Kernel[:0], UserFP: out.UserFP[:0]} // (a recycled sample's memory)
		if s.Period == 0 {
			out.Period = 1
		}
		if c.clock >= 0 {
			c.clock = -1
			if s.Attr != nil && s.Attr.Flags&perfdata.FlagUseClockID != 0 && s.Attr.ClockID == clockMonotonic {
				c.clock = 1
			}
		}
		// A decompressed record's memory is reused after the call.
		borrow := c.Borrow && !rec.Decompressed
		if s.RegsABI != perfdata.RegsABINone {
			raw := s.RegsRaw
			if len(raw) != 8*len(s.Regs) || !borrow {
				// (A sample made without a record's bytes, or
				// one from a ring buffer: copied.)
				raw = c.keepRegs(s.Regs)
			}
			out.arch, out.regMask, out.rawRegs = c.Arch, s.Attr.SampleRegsUser, raw
			out.pc, out.sp, out.HasRegs = regs.PCSPFromPerfRaw(c.Arch, out.regMask, raw)
			out.Stack = s.Stack
			out.stackFull = s.Attr != nil && s.Attr.SampleStackUser > 0 && len(s.Stack) >= int(s.Attr.SampleStackUser)
			if !borrow {
				out.Stack = c.keep(s.Stack)
			}
		}
		ctx := perfdata.ContextKernel
		if s.Misc&perfdata.MiscCPUModeMask == perfdata.MiscUser {
			ctx = perfdata.ContextUser
		}
		for _, ip := range s.Callchain {
			if ip >= perfdata.ContextMax {
				ctx = ip
				continue
			}
			switch ctx {
			case perfdata.ContextKernel:
				out.Kernel = append(out.Kernel, ip)
			case perfdata.ContextUser:
				out.UserFP = append(out.UserFP, ip)
			}
		}
		if len(s.Callchain) == 0 && s.Misc&perfdata.MiscCPUModeMask == perfdata.MiscKernel {
			out.Kernel = append(out.Kernel, s.IP)
		}
		if len(s.Callchain) == 0 && !out.HasRegs && s.Misc&perfdata.MiscCPUModeMask == perfdata.MiscUser {
			// No call graph recorded: the sampled IP is a one-frame
			// user stack, as perf report shows it.
			out.UserFP = append(out.UserFP, s.IP)
		}
		if c.Memory != nil && out.HasRegs {
			out.Extra = c.Memory.SampleMemory(out.PID, out.TID, out.Time, out.sp)
		}
		if c.Interp != nil && out.HasRegs {
			out.Interp = c.Interp.SampleInterp(out.PID, out.TID, out.Time)
		}
		c.pendingBytes += out.bytes()
		c.add(event{time: t, kind: perfdata.RecordSample, smp: out})
		return out
	case perfdata.RecordMmap, perfdata.RecordMmap2:
		m := rec.Mmap
		if int32(m.PID) == -1 || !m.Executable {
			return nil // the kernel's own mapping, or data
		}
		c.add(event{time: t, kind: perfdata.RecordMmap2, pid: int(m.PID), mmap: &target.Mapping{
			Start: m.Addr, End: m.Addr + m.Len, Offset: m.PgOff, Path: strings.TrimSpace(m.Filename), Perms: "r-xp",
		}})
	case perfdata.RecordComm:
		if rec.Comm.Exec && c.Memory != nil {
			c.Memory.Exec(int(rec.Comm.PID))
		}
		if rec.Comm.Exec && c.Interp != nil {
			c.Interp.Exec(int(rec.Comm.PID))
		}
		c.add(event{time: t, kind: perfdata.RecordComm, pid: int(rec.Comm.PID), tid: int(rec.Comm.TID), str: rec.Comm.Comm, exec: rec.Comm.Exec})
	case perfdata.RecordFork:
		if c.Interp != nil && rec.Task.PID != rec.Task.PPID {
			// A new process, maybe under a reused process id.
			c.Interp.Exec(int(rec.Task.PID))
		}
		c.add(event{time: t, kind: perfdata.RecordFork, pid: int(rec.Task.PID), ppid: int(rec.Task.PPID), tid: int(rec.Task.TID)})
	case perfdata.RecordLost, perfdata.RecordLostSamples:
		c.Lost += rec.Lost
	}
	return nil
}

// Continue returns a copy of a taken sample stamped at time t with Period
// 0, sharing its stack copy and address space, or nil when s was not taken
// yet or its stack was already unwound. The agent continues a thread that
// is still blocked at the end of a period into the next one with it.
func (s *Sample) Continue(t uint64) *Sample {
	if s.space == nil || (s.HasRegs && s.Stack == nil) {
		return nil
	}
	c := *s
	c.Time, c.Period = t, 0
	return &c
}

// AddProcess seeds a running process's state from /proc: its executable
// mappings and its threads' names, as if recorded before time 0.
func (c *Collector) AddProcess(pid int) error {
	maps, err := procmaps.Read(pid)
	if err != nil {
		return err
	}
	for i := range maps {
		if m := &maps[i]; m.Executable() {
			c.add(event{kind: perfdata.RecordMmap2, pid: pid, mmap: m})
		}
	}
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid)); err == nil {
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/comm", pid, tid)); err == nil {
				c.add(event{kind: perfdata.RecordComm, pid: pid, tid: tid, str: strings.TrimSpace(string(b))})
			}
		}
	}
	return nil
}

// AddMappings seeds a process's executable mappings from a list its
// source kept (as if recorded before time 0), as AddProcess does from
// /proc: rewind's in-kernel unwinder describes processes while they run,
// and their stacks are built when they may have exited.
func (c *Collector) AddMappings(pid int, maps []target.Mapping) { c.AddMappingsAt(pid, 0, maps) }

// AddMappingsAt is AddMappings at time t (perf clock): samples from t on
// are named with these mappings, where they replace others.
func (c *Collector) AddMappingsAt(pid int, t uint64, maps []target.Mapping) {
	for i := range maps {
		if m := maps[i]; m.Executable() {
			m.Module, m.Bias = nil, 0
			c.add(event{time: t, kind: perfdata.RecordMmap2, pid: pid, mmap: &m})
		}
	}
}

// AddComm names a thread (as a perf COMM record would, before time 0).
func (c *Collector) AddComm(pid, tid int, comm string) {
	c.add(event{kind: perfdata.RecordComm, pid: pid, tid: tid, str: comm})
}

// KernelWalk is the Fidelity.Method name of stacks unwound in the kernel
// (AddStack).
const KernelWalk = "kernel"

// AddStack adds a finished stack, unwound in the kernel by rewind's BPF
// unwinder instead of from a stack copy: user PCs leaf first (the first
// the sampled PC, the others return addresses), kernel PCs leaf first,
// weighted by value (samples, or nanoseconds off CPU) and standing for
// count events (samples, or blocked intervals), at time t (perf clock).
// end says why the walk stopped; it is counted per reason in the
// KernelWalk fidelity. The symbolizer and every output treat these stacks
// like the others.
func (c *Collector) AddStack(pid, tid int, t, value uint64, count int, user, kernel []uint64, end string) *Sample {
	out := c.newSample()
	*out = Sample{PID: pid, TID: tid, Time: t, Period: max(value, 1), walkEnd: end, walkCount: max(count, 1),
		UserFP: append([]uint64(nil), user...), Kernel: append([]uint64(nil), kernel...)}
	if len(out.UserFP) > 0 {
		out.IP = out.UserFP[0]
	}
	c.add(event{time: t, kind: perfdata.RecordSample, smp: out})
	return out
}

// Samples replays every pending record in time order and returns the
// samples not taken yet, each bound to the address space its process had
// when it was taken.
func (c *Collector) Samples() []*Sample { return c.Take(math.MaxUint64) }

// Take replays the pending records older than before (perf clock
// nanoseconds) in time order and returns their samples, which the
// collector then forgets: a long recording is unwound piece by piece (see
// Builder) instead of keeping every stack copy. Records newer than before
// stay pending, so that records of other CPUs read later can still be
// sorted in among them.
func (c *Collector) Take(before uint64) []*Sample {
	if !slices.IsSortedFunc(c.events, cmpEventTime) {
		slices.SortStableFunc(c.events, cmpEventTime)
	}
	n := sort.Search(len(c.events), func(i int) bool { return c.events[i].time >= before })
	out := make([]*Sample, 0, n)
	for i := range c.events[:n] {
		e := &c.events[i]
		switch e.kind {
		case perfdata.RecordSample:
			p := c.process(e.smp.PID)
			e.smp.space = p.cur
			e.smp.comm = c.comms[e.smp.TID]
			c.pendingBytes -= e.smp.bytes()
			out = append(out, e.smp)
		case perfdata.RecordMmap2:
			p := c.process(e.pid)
			p.cur = &space{pid: e.pid, maps: insertMapping(p.cur.maps, *e.mmap)}
		case perfdata.RecordComm:
			p := c.process(e.pid)
			if e.exec {
				p.cur = &space{pid: e.pid}
			}
			c.comms[e.tid] = e.str
		case perfdata.RecordFork:
			if e.pid != e.ppid {
				parent := c.process(e.ppid)
				child := c.process(e.pid)
				child.cur = &space{pid: e.pid, maps: parent.cur.maps}
				if n, ok := c.comms[e.ppid]; ok {
					c.comms[e.tid] = n
				}
			} else if n, ok := c.comms[e.pid]; ok {
				if _, has := c.comms[e.tid]; !has {
					c.comms[e.tid] = n
				}
			}
		}
	}
	rest := copy(c.events, c.events[n:])
	clear(c.events[rest:])
	c.events = c.events[:rest]
	return out
}

// cmpEventTime orders events by time.
func cmpEventTime(a, b event) int { return cmp.Compare(a.time, b.time) }

// PendingBytes is the size of the stack copies of the samples not taken
// yet.
func (c *Collector) PendingBytes() int { return c.pendingBytes }

// LastTime is the newest record time seen (perf clock nanoseconds).
func (c *Collector) LastTime() uint64 { return c.lastTime }

func (c *Collector) process(pid int) *process {
	p := c.procs[pid]
	if p == nil {
		p = &process{pid: pid, cur: &space{pid: pid}}
		c.procs[pid] = p
	}
	return p
}

// Prune forgets the processes and thread names for which alive(id)
// is false (an id is a PID or a TID), so that a long recording of a host
// where processes come and go keeps bounded state. Call it only when no
// record of those processes is pending (after Take of everything).
func (c *Collector) Prune(alive func(id int) bool) {
	for pid := range c.procs {
		if !alive(pid) {
			delete(c.procs, pid)
		}
	}
	for tid := range c.comms {
		if !alive(tid) {
			delete(c.comms, tid)
		}
	}
}

// Processes returns the number of processes the collector tracks.
func (c *Collector) Processes() int { return len(c.procs) }

// Comm returns the name of a thread ("" if unknown).
func (c *Collector) Comm(tid int) string { return c.comms[tid] }

// insertMapping returns maps (sorted, non-overlapping) with m added,
// cutting whatever it overlaps. maps is not modified.
func insertMapping(maps []target.Mapping, m target.Mapping) []target.Mapping {
	out := make([]target.Mapping, 0, len(maps)+1)
	for _, o := range maps {
		if o.End <= m.Start || o.Start >= m.End {
			out = append(out, o)
			continue
		}
		if o.Start < m.Start {
			l := o
			l.End = m.Start
			out = append(out, l)
		}
		if o.End > m.End {
			r := o
			if r.Path != "" && r.Path[0] == '/' {
				r.Offset += m.End - o.Start
			}
			r.Start = m.End
			out = append(out, r)
		}
	}
	out = append(out, m)
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// addressSpace builds (once) the address space of a generation, through
// the one target constructor.
func (c *Collector) addressSpace(s *space) *target.AddressSpace {
	if s.built == nil {
		s.built = target.New(target.Config{PID: s.pid, Arch: c.Arch, Mappings: s.maps, Objects: c.Objects, VDSO: c.vdsoModule()}).Space
		c.attachPerfMap(s.pid, s.built)
	}
	return s.built
}

// attachPerfMap names the code JIT compilers generated in process pid's
// anonymous executable memory from its jitdump (a jit-PID.dump it mapped,
// as perf inject --jit finds it) and its perf map (/tmp/perf-PID.map),
// as perf report reads them (Node and the JVM leave them behind): read
// when first needed, and again when a lookup misses and the map has grown
// (perfMapSyms), or appeared.
func (c *Collector) attachPerfMap(pid int, sp *target.AddressSpace) {
	var jit target.JITSymbols
	for _, m := range sp.Mappings() {
		if !jitMemory(m) {
			continue
		}
		if jit == nil {
			if c.perfMaps == nil {
				c.perfMaps = map[int]target.JITSymbols{}
			}
			var ok bool
			if jit, ok = c.perfMaps[pid]; !ok {
				if len(c.perfMaps) >= maxPerfMaps {
					clear(c.perfMaps) // (a long-running agent: read again)
				}
				jit = c.openJIT(pid, sp)
				c.perfMaps[pid] = jit
			}
			if jit == nil {
				return
			}
		}
		m.JIT = jit
	}
}

// openJIT reads process pid's jitdump and perf map, nil when it has
// neither.
func (c *Collector) openJIT(pid int, sp *target.AddressSpace) target.JITSymbols {
	var srcs target.JITSources
	warn := func(err error) {
		if err != nil && !errors.Is(err, os.ErrNotExist) && c.Warn != nil {
			c.Warn(err.Error())
		}
	}
	for _, m := range sp.Mappings() {
		if m.IsFile() && jitdump.IsDump(m.Path) {
			d, err := jitdump.OpenProcess(pid, m.Path)
			warn(err)
			if err == nil {
				srcs = append(srcs, d)
			}
			break
		}
	}
	pm, err := perfmap.Open(pid)
	warn(err)
	switch {
	case err == nil:
		srcs = append(srcs, &perfMapSyms{pid: pid, m: pm, checked: time.Now(), warn: warn})
	case errors.Is(err, os.ErrNotExist) && len(srcs) == 0:
		// None yet: a JIT may write its map after mapping its code
		// (the JVM when asked, with jcmd): looked for on a miss.
		srcs = append(srcs, &perfMapSyms{pid: pid, m: &perfmap.Map{}, checked: time.Now(), warn: warn})
	}
	if d, ok := firstDump(srcs); ok && c.clock > 0 && d.Flags&jitdump.FlagArchTimestamp == 0 {
		// The samples' clock is the dump's: each sample's code is
		// the code there at its time.
		tj := &timedJIT{d: d}
		if len(srcs) > 1 {
			tj.other = srcs[1]
		}
		return tj
	}
	switch len(srcs) {
	case 0:
		return nil
	case 1:
		return srcs[0]
	}
	return srcs
}

// clockMonotonic is CLOCK_MONOTONIC's clock id.
const clockMonotonic = 1

// maxPerfMaps bounds the perf maps a collector keeps.
const maxPerfMaps = 64

// jitMemory reports whether m is anonymous executable memory, where JIT
// compilers put their code: "//anon" in perf's MMAP records, "" in
// /proc/PID/maps (or "[anon:NAME]" when named).
func jitMemory(m *target.Mapping) bool {
	anon := m.Path == "" || m.Path == "//anon" || strings.HasPrefix(m.Path, "[anon:")
	return anon && (m.Perms == "" || strings.Contains(m.Perms, "x"))
}

// vdsoModule returns this process's vDSO, which is the kernel's and
// therefore the sampled processes' too.
func (c *Collector) vdsoModule() *target.Module {
	if c.vdso != nil || c.vdsoErr != nil {
		return c.vdso
	}
	img, err := selfVDSO()
	var mod *target.Module
	if err == nil {
		if mod, err = target.VDSOImage(img, c.Objects); err == nil && c.vdsoID != "" && c.vdsoID != mod.File.BuildIDHex() {
			err = fmt.Errorf("[vdso] of the recording (build-id %s) is not this kernel's (%s): its frames are not unwound", c.vdsoID, mod.File.BuildIDHex())
		}
	}
	if err != nil {
		c.vdsoErr = err
		if c.Warn != nil {
			c.Warn(err.Error())
		}
		return nil
	}
	c.vdso = mod
	return mod
}

// selfVDSO reads this process's vDSO image.
func selfVDSO() ([]byte, error) {
	maps, err := procmaps.Read(os.Getpid())
	if err != nil {
		return nil, err
	}
	for _, m := range maps {
		if m.Path != target.VDSOPath {
			continue
		}
		if m.End <= m.Start || m.End-m.Start > 1<<20 {
			break
		}
		f, err := os.Open("/proc/self/mem")
		if err != nil {
			return nil, err
		}
		defer f.Close()
		img := make([]byte, m.End-m.Start)
		if _, err := f.ReadAt(img, int64(m.Start)); err != nil {
			return nil, fmt.Errorf("reading own [vdso]: %w", err)
		}
		return img, nil
	}
	return nil, fmt.Errorf("no [vdso] in this process")
}
