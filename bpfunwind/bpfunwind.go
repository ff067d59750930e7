// Package bpfunwind walks user stacks in the kernel: a BPF program on a
// perf event (on-CPU samples) or on the sched_switch tracepoint (off-CPU
// time) unwinds the thread's user stack with rows compiled from rewind's
// own unwind tables (package unwindtable), takes the kernel stack from the
// kernel's own walk, and counts each (thread, user stack, kernel stack) in
// BPF maps that user space reads once per period. No stack is copied and
// nothing per event crosses to user space: an operator's fleet profiler.
//
// User space (this package) describes every traced process to the
// program: its executable mappings (address to file and load bias) in the
// procs map, and each mapped file's rows once, shared by every process
// mapping it (keyed by build-id, else path, device and inode). The program
// asks, through a small ring buffer and at most every 10 ms per process,
// for processes it does not know or PCs outside the described mappings
// (new processes, exec, dlopen); exits are announced too.
//
// Map sizes are fixed when the program loads (Sizes; at most the Max
// constants, bpf/unwind.bpf.c): 128 frames per stack; 256 executable
// mappings per process; 8,192 processes; 4,096 files; up to 3,145,728 rows
// of 8 bytes (24 MiB) for all files, sharing up to 65,536 distinct rules of
// 16 bytes (1 MiB) (when a file does not fit, files no
// process maps any more, then the least recently used, are evicted and
// loaded again when next met: reclaim.go); up to 32,768 distinct user stacks
// (least recently used evicted); up to 65,536 counted (thread, stack) pairs
// per period in each of two count maps; up to 16,384 kernel stacks in
// each of two kernel-stack maps, one per count map (emptied once its
// period is read; a kernel stack whose hash bucket is taken is counted in
// Errors.KStacksFull and its samples have no kernel frames). A file
// whose rows do not fit, a full map, or a rule the program cannot apply
// ends the affected stacks with a reason (End) instead of wrong frames.
//
// The walk is x86-64 only for now. It needs Linux 5.17 or later: BTF,
// bpf_loop and bpf_find_vma (5.17), bpf_task_pt_regs (5.15), the task's
// __state field (5.14), BTF tracepoints and ring buffers (5.5, 5.8); before
// 6.1 its hash maps are preallocated and smaller (prealloc.go).
package bpfunwind

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/rewindstack/rewind/internal/tracefs"
	"github.com/rewindstack/rewind/profiles"
	"github.com/rewindstack/rewind/target"
)

// Sizes of the BPF maps (they must agree with bpf/unwind.bpf.c). Rows,
// stacks, counts and kernel stacks are the most a run may ask for
// (Options.Sizes); the others are fixed.
const (
	MaxFrames  = 128
	MaxMaps    = 256
	MaxProcs   = 8192
	MaxFiles   = 4096
	MaxRows    = 3 << 20
	MaxRules   = 1 << 16
	MaxStacks  = 32768
	MaxCounts  = 65536
	MaxKStacks = 16384
)

// anonFile is the file index of described anonymous executable memory (a
// JIT's code): no file has it, and the walk takes frame pointers there
// (ANON_FILE in the program).
const anonFile = MaxFiles

// Sizes are the sizes of the maps that hold rows, stacks and counts,
// fixed when the program is loaded: creating (and zeroing) the largest
// took a second of the kernel's time on the development machine, too much
// for recording one process.
type Sizes struct {
	Rows, Stacks, Counts, KStacks uint32
}

// Host sizes serve a whole host (the agent): 24 MiB of rows, 32,768
// stacks (34 MiB), 65,536 counts per period, 16,384 kernel stacks in each
// of two maps (16 MiB each).
var Host = Sizes{Rows: MaxRows, Stacks: MaxStacks, Counts: MaxCounts, KStacks: MaxKStacks}

// Process sizes serve one process tree (record): the whole 24 MiB of rows
// (node alone has 372,000, libc 28,000; the map's size did not change
// Load's time, 0.7-0.8 s either way, the verifier's), 4,096 stacks,
// 16,384 counts, 4,096 kernel stacks in each of two maps.
var Process = Sizes{Rows: MaxRows, Stacks: 4096, Counts: 16384, KStacks: 4096}

// End says why the kernel walk of a user stack stopped.
type End uint8

// End reasons (enum end_reason of the BPF program).
const (
	EndNone           End = iota
	EndRoot               // a thread's entry or a Go top frame: complete
	EndRAUndefined        // CFI marks the return address undefined: complete
	EndOutermost          // a zero return address or frame pointer
	EndUnknownProcess     // the process was not described yet
	EndNoMapping          // a PC outside the described mappings
	EndFileNotLoaded      // unused: a file whose rows are not in the maps is walked by frame pointers (Stack.RowsPending)
	EndUnreadable         // user memory could not be read (paged out, unmapped)
	EndUnsupported        // a rule the BPF walk cannot apply (DWARF expression)
	EndNoProgress         // the stack pointer did not increase
	EndDepth              // 128 frames
	EndBadFP              // the frame-pointer fallback met a bad frame pointer
	EndKernelThread       // no user stack
	EndStackLost          // the stack was evicted from the stacks map before it was read
)

// RowsPendingMark is added to a kernel walk's end reason in a profile's
// fidelity table ("root+rows-pending") when frame pointers walked a file
// whose rows were not loaded yet.
const RowsPendingMark = "rows-pending"

var endNames = [...]string{"none", "root", "ra-undefined", "outermost", "unknown-process", "no-mapping",
	"file-not-loaded", "unreadable-memory", "unsupported-rule", "no-progress", "depth-limit",
	"bad-frame-pointer", "kernel-thread", "stack-evicted"}

func (e End) String() string {
	if int(e) < len(endNames) {
		return endNames[e]
	}
	return fmt.Sprintf("end(%d)", uint8(e))
}

// Complete reports whether a walk that ended so reached its thread's root.
func (e End) Complete() bool { return e == EndRoot || e == EndRAUndefined }

// Stack is one counted stack of one thread.
type Stack struct {
	PID, TID int
	// User are the user PCs, leaf first: the sampled PC, then return
	// addresses. Nil when the sample had no user stack.
	User []uint64
	// FP marks the frames found by the frame-pointer fallback (bit i:
	// User[i+1] was found from frame i by frame pointers).
	FP [2]uint64
	// GoSwitch is the index in User of the first frame found at a
	// goroutine's saved registers, past a Go stack switch on g0
	// (runtime.morestack, runtime.systemstack); 0 when the walk crossed
	// none that way.
	GoSwitch int
	// RowsPending: the walk went through a file whose rows were not
	// loaded yet (still being described, evicted, too big for the rows
	// map) by frame pointers instead of ending there.
	RowsPending bool
	// Kernel are the kernel PCs, leaf first.
	Kernel []uint64
	End    End
	// Value is the sample count (on-CPU) or nanoseconds off CPU.
	Value uint64
	// Events is the number of samples or blocked intervals counted.
	Events uint64
	// OffCPU marks a blocked stack (Value in nanoseconds).
	OffCPU bool
	// Gen is the description of the process the walk found its files
	// with (Describe's count; 0: none), which Feed names the PCs with;
	// with the high bit set, the description the walk found dropped (a
	// mapping replaced): the next one names it.
	Gen int
	// Interp are the interpreted frames the thread ran (interp.go), as
	// the profile splices them: each runtime's, innermost first, each
	// with the native activation running it.
	Interp []target.InterpStack
}

type mapping struct {
	Start, End, Bias uint64
	File             uint32
	_                uint32
}

type proc struct {
	N    uint32
	Gen  uint32
	Maps [MaxMaps]mapping
}

type stackVal struct {
	N      uint32
	End    uint8
	GoJump uint8
	NoRows uint8
	_      uint8
	Gen    uint32
	_      uint32
	FPMask [2]uint64
	PCs    [MaxFrames]uint64
}

type countKey struct {
	PID, TID uint32
	Stack    uint64
	KStack   int32
	Kind     uint32 // 0 on-CPU, 1 off-CPU
}

type config struct {
	Active   uint32
	Filter   uint32
	MinBlock uint64
	Period   uint32 // switches of the count maps (the kernel-stack cache's ids are per period)
	_        uint32
}

type notice struct{ PID, Kind uint32 }

// Options configure Load.
type Options struct {
	// PIDs, when not empty, limits the walks to these processes and the
	// processes they start (record); empty is system-wide (agent) unless
	// Filter is set.
	PIDs []int
	// Filter limits the walks to the processes given by PIDs or Trace.
	Filter bool
	// Objects opens the mapped files and caches their tables (shared with
	// the profile builder's symbolization); nil makes one.
	Objects *target.Objects
	// Warn receives one-line warnings (may be nil).
	Warn func(string)
	// Sizes of the maps; the zero value is Host.
	Sizes Sizes
	// LoadInBackground has a goroutine load the rows of files seen for
	// the first time, in order, instead of the Describe that met them:
	// describing a process (at start, after an exec) then takes
	// milliseconds, and its walks end file-not-loaded where they reach a
	// file not loaded yet. The agent sets it; record, which describes
	// its command's files before starting it, does not.
	LoadInBackground bool
	// SkipSelf describes this process to the program without rows, so
	// that its walks end at once (file-not-loaded): the agent, which
	// drops its own samples, sets it.
	SkipSelf bool
	// PollNotices, when set, has the program's notices read every
	// PollNotices (up to ten times less often while none come) instead
	// of as each comes: describing a process then waits up to that long,
	// and an idle agent is not woken by every process start and exit.
	PollNotices time.Duration
	// Skip, when set, names processes not to describe (the agent's
	// --comm scope): their files are not loaded for them, and their walks
	// end unknown-process or where they reach a file not loaded. Asked
	// again, a skipped process is looked at less and less often (up to
	// every 5 s), and at once after an exec.
	Skip func(pid int) bool
}

// Unwinder is the loaded BPF program and its maps.
type Unwinder struct {
	objs    unwindObjects
	opt     Options
	links   []link.Link
	perfFDs []int
	notices *ringbuf.Reader
	done    chan struct{}
	stop    chan struct{} // closed by Close: serve returns
	stats   io.Closer     // keeps the kernel's BPF run-time statistics on

	mu           sync.Mutex
	files        map[string]uint32                       // file identity -> index in files
	maxFiles     int                                     // indexes in files: MaxFiles (fewer in tests)
	pool         *rowPool                                // the rows map's files and free ranges (reclaim.go)
	procMaps     map[int][]target.Mapping                // what each process was described with
	gen          map[int]int                             // descriptions of each process made
	history      map[int]map[int][]target.Mapping        // the last descriptions of each process, by gen
	fed          map[*profiles.Collector]map[int]int     // descriptions handed to each collector by Feed
	comms        map[int]string                          // each process's command name when described
	named        map[*profiles.Collector]map[[2]int]bool // threads (PID, TID) named to each collector
	exited       map[int]bool                            // processes that exited since the last Read
	exitedBefore map[int]bool                            // ... before the last Read: forgotten at the next
	notes        map[string]int                          // period-line notes: files too big, maps full
	active       uint32
	lastPrune    [2]int                                 // kernel stacks kept and deleted by the last Read
	inodes       map[struct{ Dev, Ino uint64 }]inodeVal // what the inodes map was told
	described    map[int]describedProc                  // what each process was last described with
	work         workCounters
	selfDev      uint64 // this process's executable (Options.SkipSelf)
	selfIno      uint64
	offOn        bool               // the off-CPU program is attached
	credited     map[uint32]credit  // blocked intervals credited to past periods, by thread
	owed         map[countKey]*owed // ... and the time to take off their counts

	loads       chan fileLoad   // files for the loader goroutine (Options.LoadInBackground)
	urgentLoads chan fileLoad   // ... of processes the program asked about: first
	later       map[uint32]bool // files in loads only
	loaded      map[uint32]bool // files the loader took
	loaderDone  sync.WaitGroup
	closing     atomic.Bool // the loader skips what is left
	pending     sync.Mutex
	queued      int           // files handed to the loader and not loaded yet
	idle        chan struct{} // closed when queued drops to zero (WaitLoaded)

	interp iState // interpreter processes (interp.go)

	rules ruleTable // the rules the rows map's rows share (rows.go)
}

// Load loads the BPF programs and creates their maps. Its error says in one
// line why the kernel cannot walk stacks (no privilege, no BTF, a verifier
// refusal), for the caller's fallback to user-space unwinding. It mounts
// tracefs first when it is not (the ebpf library finds there the
// tracepoints that follow unmapping; that it cannot be is among the
// notes), as perf does on a fresh machine.
func Load(opt Options) (*Unwinder, error) {
	tracefs.Root()
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		return nil, errors.New("no kernel BTF (/sys/kernel/btf/vmlinux)")
	}
	if err := removeMemlock(); err != nil && errors.Is(err, unix.EPERM) {
		return nil, errors.New("not permitted to load BPF programs (needs root, or CAP_BPF, CAP_PERFMON and CAP_SYS_RESOURCE)")
	} else if err != nil {
		return nil, fmt.Errorf("raising the locked-memory limit: %w", err)
	}
	if opt.Objects == nil {
		opt.Objects = &target.Objects{}
	}
	u := &Unwinder{opt: opt, files: map[string]uint32{}, maxFiles: MaxFiles, procMaps: map[int][]target.Mapping{}, gen: map[int]int{}, history: map[int]map[int][]target.Mapping{}, fed: map[*profiles.Collector]map[int]int{}, comms: map[int]string{}, named: map[*profiles.Collector]map[[2]int]bool{}, exited: map[int]bool{},
		notes: map[string]int{}, done: make(chan struct{}), stop: make(chan struct{}), inodes: map[struct{ Dev, Ino uint64 }]inodeVal{}, described: map[int]describedProc{}, owed: map[countKey]*owed{}}
	if opt.Sizes == (Sizes{}) {
		opt.Sizes = Host
	}
	u.opt.Sizes = opt.Sizes
	u.pool = newRowPool(rowsTotal(opt.Sizes), func(idx uint32) (uint64, bool) {
		var fr fileRows
		err := u.objs.Files.Lookup(idx, &fr)
		return fr.Used, err == nil
	}, func(idx uint32) error { return u.objs.Files.Update(idx, fileRows{}, ebpf.UpdateAny) })
	var st unix.Stat_t
	if opt.SkipSelf && unix.Stat("/proc/self/exe", &st) == nil {
		u.selfDev, u.selfIno = statDev(&st), st.Ino
	}
	if err := u.loadObjects(); err != nil {
		return nil, loadError(err)
	}
	cfg := config{}
	if len(opt.PIDs) > 0 || opt.Filter {
		cfg.Filter = 1
		for _, pid := range opt.PIDs {
			one := uint8(1)
			if err := u.objs.Pids.Update(uint32(pid), one, ebpf.UpdateAny); err != nil {
				u.Close()
				return nil, fmt.Errorf("bpf pids map: %w", err)
			}
		}
	}
	if err := u.objs.Config.Update(uint32(0), cfg, ebpf.UpdateAny); err != nil {
		u.Close()
		return nil, fmt.Errorf("bpf config map: %w", err)
	}
	var err error
	if u.notices, err = ringbuf.NewReader(u.objs.Notices); err != nil {
		u.Close()
		return nil, err
	}
	for _, p := range []*ebpf.Program{u.objs.OnFork, u.objs.OnExec, u.objs.OnExit} {
		l, err := link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			u.Close()
			return nil, fmt.Errorf("attaching %v: %w", p, err)
		}
		u.links = append(u.links, l)
	}
	// Unmapping is followed where a new mapping takes an unmapped
	// range (mmap:vm_unmapped_area), and, for a process tree (record),
	// at munmap and MAP_FIXED mmap too: the syscall tracepoints slow
	// every system call of the host down, too much for the agent.
	hooks := []struct {
		group, name string
		p           *ebpf.Program
	}{{"mmap", "vm_unmapped_area", u.objs.OnUnmappedArea}}
	if len(opt.PIDs) > 0 || opt.Filter {
		hooks = append(hooks, []struct {
			group, name string
			p           *ebpf.Program
		}{{"syscalls", "sys_enter_munmap", u.objs.OnMunmap}, {"syscalls", "sys_exit_munmap", u.objs.OnMunmapExit},
			{"syscalls", "sys_enter_mmap", u.objs.OnMmap}, {"syscalls", "sys_exit_mmap", u.objs.OnMmapExit}}...)
	}
	for _, h := range hooks {
		l, err := link.Tracepoint(h.group, h.name, h.p, nil)
		if err != nil {
			u.note("unmapping is not followed: no " + h.group + ":" + h.name + " tracepoint")
			continue
		}
		u.links = append(u.links, l)
	}
	// The programs' CPU time is charged to the tasks they run on, not to
	// this process: the kernel's statistics tell it (ProgramTime).
	u.stats, _ = ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if opt.LoadInBackground {
		u.loads = make(chan fileLoad, MaxFiles)
		u.urgentLoads = make(chan fileLoad, 2*MaxFiles)
		u.later, u.loaded = map[uint32]bool{}, map[uint32]bool{}
		u.loaderDone.Add(2)
		go u.loader(u.loads)
		go u.loader(u.urgentLoads)
	}
	go u.serve()
	for _, pid := range opt.PIDs {
		u.Describe(pid)
	}
	return u, nil
}

// loadError says in one line why the programs did not load.
func loadError(err error) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return fmt.Errorf("the kernel's verifier refused the unwinder: %v", firstLine(ve.Error()))
	}
	if errors.Is(err, unix.EPERM) {
		return errors.New("not permitted to load BPF programs (needs root, or CAP_BPF and CAP_PERFMON)")
	}
	return fmt.Errorf("loading the BPF unwinder: %v", firstLine(err.Error()))
}

func firstLine(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			return s[:i]
		}
	}
	return s
}

// OnCPU samples every CPU freq times a second of CPU time (cpu-clock) and
// counts the sampled stacks.
func (u *Unwinder) OnCPU(freq int) error {
	ncpu, err := possibleCPUs()
	if err != nil {
		return err
	}
	for cpu := 0; cpu < ncpu; cpu++ {
		attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK,
			Sample: uint64(freq), Bits: unix.PerfBitFreq | unix.PerfBitDisabled}
		attr.Size = uint32(binary.Size(attr))
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			if errors.Is(err, unix.ENODEV) || errors.Is(err, unix.EINVAL) && cpu > 0 {
				continue // an offline CPU
			}
			return fmt.Errorf("perf_event_open (cpu-clock, CPU %d): %w", cpu, err)
		}
		u.perfFDs = append(u.perfFDs, fd)
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, u.objs.OnCpu.FD()); err != nil {
			return fmt.Errorf("attaching the BPF unwinder to CPU %d's perf event: %w", cpu, err)
		}
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
			return err
		}
	}
	return nil
}

// OffCPU counts the time threads spend blocked (not preempted), per stack,
// from the sched_switch tracepoint; intervals shorter than minBlock are not
// counted.
func (u *Unwinder) OffCPU(minBlock time.Duration) error {
	cfg := config{Active: u.active, MinBlock: uint64(minBlock)}
	if len(u.opt.PIDs) > 0 || u.opt.Filter {
		cfg.Filter = 1
	}
	if err := u.objs.Config.Update(uint32(0), cfg, ebpf.UpdateAny); err != nil {
		return err
	}
	l, err := link.AttachTracing(link.TracingOptions{Program: u.objs.OffCpu})
	if err != nil {
		return fmt.Errorf("attaching to sched_switch: %w", err)
	}
	u.links = append(u.links, l)
	u.offOn = true
	return nil
}

func possibleCPUs() (int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/possible")
	if err != nil {
		return 0, err
	}
	var lo, hi int
	if n, _ := fmt.Sscanf(string(b), "%d-%d", &lo, &hi); n == 2 {
		return hi + 1, nil
	}
	return 1, nil
}

// Close detaches the programs and frees the maps.
func (u *Unwinder) Close() error {
	for _, fd := range u.perfFDs {
		unix.Close(fd)
	}
	u.perfFDs = nil
	for _, l := range u.links {
		l.Close()
	}
	u.links = nil
	if u.stats != nil {
		u.stats.Close()
		u.stats = nil
	}
	if u.notices != nil {
		close(u.stop)
		u.notices.Close()
		<-u.done
		u.notices = nil
	}
	if u.loads != nil {
		u.closing.Store(true)
		close(u.loads)
		close(u.urgentLoads)
		u.loaderDone.Wait()
		u.loads = nil
	}
	return u.objs.Close()
}

// serve answers the program's notices until Close: as each comes, or
// with Options.PollNotices in batches.
func (u *Unwinder) serve() {
	defer close(u.done)
	if u.opt.PollNotices > 0 {
		u.poll()
		return
	}
	var rec ringbuf.Record
	for {
		if err := u.notices.ReadInto(&rec); err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			continue
		}
		u.answer(rec.RawSample)
	}
}

// poll answers the notices waiting every Options.PollNotices, less and
// less often while none come; after ten quiet checks it blocks in the
// ring buffer until the next notice. Waiting in a Go timer instead of a
// blocking epoll_wait while notices come spares the runtime's sysmon,
// which wakes every 20 µs for a while after each goroutine blocked in a
// system call: with a notice a process start or exit on a busy host,
// that was most of an idle agent's CPU. Blocking once quiet spares the
// timer's wakeups.
func (u *Unwinder) poll() {
	var rec ringbuf.Record
	drain := func() {
		u.notices.SetDeadline(time.Now()) // what is there, without waiting
		for u.notices.ReadInto(&rec) == nil {
			u.answer(rec.RawSample)
		}
	}
	wait, quiet := u.opt.PollNotices, 0
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-u.stop:
			return
		case <-t.C:
		}
		if u.notices.AvailableBytes() > 0 {
			drain()
			wait, quiet = u.opt.PollNotices, 0
		} else if quiet++; quiet >= 10 {
			u.notices.SetDeadline(time.Time{})
			err := u.notices.ReadInto(&rec)
			if errors.Is(err, os.ErrClosed) {
				return
			}
			if err == nil {
				u.answer(rec.RawSample)
				drain()
			}
			wait, quiet = u.opt.PollNotices, 0
		} else {
			wait = min(2*wait, 10*u.opt.PollNotices)
		}
		t.Reset(wait)
	}
}

// answer handles one notice: describes a process, forgets one that
// exited, or reads an interpreter process's threads again.
func (u *Unwinder) answer(raw []byte) {
	if len(raw) < 8 {
		return
	}
	n := notice{binary.LittleEndian.Uint32(raw), binary.LittleEndian.Uint32(raw[4:])}
	switch n.Kind {
	case 1:
		u.Describe(int(n.PID))
	case 3:
		u.refreshInterp(int(n.PID))
	case 2:
		u.work.exits.Add(1)
		u.mu.Lock()
		_, known := u.gen[int(n.PID)]
		if known {
			u.exited[int(n.PID)] = true
		}
		u.mu.Unlock()
		if known { // (a process never described has nothing to forget)
			u.objs.Procs.Delete(n.PID)
			u.dropUser(int(n.PID))
		}
	}
}

// ProgramTime is the CPU time the walking programs (on-CPU and off-CPU)
// have taken so far, in the tasks they ran on, and how often they ran;
// zero when the kernel keeps no statistics.
func (u *Unwinder) ProgramTime() (time.Duration, uint64) {
	var d time.Duration
	var n uint64
	for _, p := range []*ebpf.Program{u.objs.OnCpu, u.objs.OffCpu} {
		if st, err := p.Stats(); err == nil {
			d += st.Runtime
			n += st.RunCount
		}
	}
	return d, n
}

// loadObjects loads the programs with the maps sized by Options.Sizes.
func (u *Unwinder) loadObjects() error {
	spec, err := loadUnwind()
	if err != nil {
		return err
	}
	z := u.opt.Sizes
	for name, n := range map[string]uint32{"rows": min(z.Rows, MaxRows), "stacks": min(z.Stacks, MaxStacks),
		"istacks": min(z.Stacks, IMaxStacks), "counts0": min(z.Counts, MaxCounts), "counts1": min(z.Counts, MaxCounts), "kstacks0": min(z.KStacks, MaxKStacks), "kstacks1": min(z.KStacks, MaxKStacks)} {
		if m := spec.Maps[name]; m != nil && n > 0 {
			m.MaxEntries = n
		}
	}
	if forcePrealloc || kernelBefore(6, 1) {
		if note := preallocate(spec); note != "" {
			u.note(note)
		}
	}
	return spec.LoadAndAssign(&u.objs, nil)
}

// removeMemlock lifts RLIMIT_MEMLOCK, which kernels before 5.11 charge BPF
// maps to (later ones charge the memory cgroup, and then a limit that
// cannot be raised does not matter). It does what cilium/ebpf's
// rlimit.RemoveMemlock does without importing that package, whose init
// creates a BPF map and reads /proc/self/mountinfo in every rewind
// process, whatever its command (about 1 ms of each start on the
// development VM).
func removeMemlock() error {
	var cur unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &cur); err == nil && cur.Cur == unix.RLIM_INFINITY {
		return nil
	}
	err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY})
	if err != nil && memcgCharged() {
		return nil
	}
	return err
}

// memcgCharged reports whether the running kernel charges BPF memory to
// the memory cgroup rather than to RLIMIT_MEMLOCK: Linux 5.11 and later.
func memcgCharged() bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	rel := unix.ByteSliceToString(u.Release[:])
	var major, minor int
	if _, err := fmt.Sscanf(rel, "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 5 || major == 5 && minor >= 11
}
