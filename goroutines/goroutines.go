// Package goroutines reads the goroutines of another Go program, live or
// from a core file, without its cooperation: the SIGQUIT dump without
// killing it. A live process is paused once: its threads are captured as
// package live does, and in the same pause the runtime's goroutine list,
// every goroutine's g and the used part of its stack are copied with
// batched process_vm_readv calls. Goroutines are a kind of target context
// (target.KindGoroutine): a parked goroutine unwinds from its saved
// registers (g.sched, g.syscallsp/pc) over its copied stack; a running one
// from the registers of the thread it runs on. Package
// goroutines/traceback names their frames as Go's traceback shows them
// and writes the dump as Go prints it.
//
// Where the runtime's data is comes from package internal/goruntime: the
// binary's DWARF types and symbols when present, or for binaries built
// with -ldflags='-s -w' its pcln table, build information and a
// per-version offset table.
//
// Threads asleep in the kernel whose registers no goroutine needs are not
// stopped at all (live.Options.LeaveAsleep): they cannot change memory
// while they sleep, and the kernel's count of their runs, read before
// and after, shows they did not run meanwhile.
package goroutines

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rewindstack/rewind/corefile"
	"github.com/rewindstack/rewind/internal/goruntime"
	"github.com/rewindstack/rewind/internal/procmaps"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/target"
)

// Goroutine is one goroutine as read from the runtime.
type Goroutine struct {
	// ID is the goroutine's id (goid), as Go's tracebacks print it.
	ID int64
	// Status is its state: "waiting", "runnable", "running", "syscall",
	// "preempted", "copystack", ... (the runtime's gStatusStrings).
	Status string
	// Scan is set while the garbage collector holds the goroutine for a
	// stack scan (Go prints " (scan)").
	Scan bool
	// WaitReason is what a waiting goroutine waits for, as Go prints it
	// in the brackets ("chan receive", "select", "sleep"); "" otherwise.
	WaitReason string
	// WaitMinutes is how long a waiting or syscall goroutine has been
	// blocked, in whole minutes as Go prints it; -1 when unknown (a core
	// file does not say when it was written in the runtime's clock).
	WaitMinutes int64
	// Thread is the TID of the thread running the goroutine (running and
	// syscall goroutines), 0 when none.
	Thread int
	// LockedToThread is set after runtime.LockOSThread.
	LockedToThread bool
	// Labels are its pprof labels (nil when none).
	Labels map[string]string
	// ParentID is the goroutine that created it (0 for the main and the
	// runtime's own goroutines).
	ParentID int64
	// GoPC is the address of the go statement that created it; StartPC
	// its function's entry.
	GoPC, StartPC uint64

	g *raw
}

// Set is the goroutines of one process, read in one consistent snapshot.
type Set struct {
	// Goroutines are sorted by ID.
	Goroutines []Goroutine
	// GoVersion is the toolchain that built the program; Layout says
	// where the runtime's offsets came from ("dwarf", "table go1.26").
	GoVersion, Layout string
	// Notes explain goroutines dropped or cut (a torn g, an unreadable
	// stack) and data not read.
	Notes []string

	exe  string // the executable's path as mapped
	arch regs.Arch
	kept int // stacks taken from the read before the pause
	// again: the pause's read compared with the read before it
	// (readAgain), rather than reading everything anew.
	again bool

	copyCost copyCost // of a live capture
	// ReadStats is what reading the goroutines in a live capture's pause
	// cost, step by step (zero for a core).
	ReadStats ReadStats
	// atRead, for a staggered capture (live.Options.MaxPause), holds the
	// threads that were stopped when the goroutines were read; nil when
	// every thread was.
	atRead map[int]bool
	// asleep holds the threads left asleep, not stopped
	// (live.Options.LeaveAsleep): their registers were not read.
	asleep map[int]bool
}

// stoppedAtRead reports whether thread tid was stopped when the
// goroutines were read: its registers are those of the goroutine the
// runtime says it runs.
func (s *Set) stoppedAtRead(tid int) bool { return s.atRead == nil || s.atRead[tid] }

// Running reports whether g was running when it was read: its context
// has the registers of the thread it ran on, and its PC is where it was,
// not a saved return address.
func (g *Goroutine) Running() bool { return g.g != nil && g.g.status == gRunning }

// SyscallThread returns the thread of goroutine g when g is in a system
// call or cgo call and that thread's registers were read with the
// goroutines (0 otherwise): the thread's walk then shows, below the
// goroutine's Go code, the C code it runs.
func (s *Set) SyscallThread(g *Goroutine) int {
	if g.g == nil || g.g.status != gSyscall || !s.stoppedAtRead(g.Thread) || s.asleep[g.Thread] {
		return 0
	}
	return g.Thread
}

// Capture pauses process pid once and returns its threads (as
// live.Capture) and its goroutines, both copied in that pause. opt is
// passed to live.Capture (opt.During is replaced). With
// opt.StaggerDuring, opt.MaxPause bounds the pause as it does a thread
// capture's: when threads are slow to stop, the goroutines are read with
// those stopped so far, and a goroutine running on a late one is listed
// without a stack (a note says so). Unless opt.Threads selects threads,
// those asleep in the kernel that no goroutine needs the registers of
// (idle Ms, the runtime's own threads, goroutines in Go's own system
// calls) are left asleep rather than stopped (live.Options.LeaveAsleep):
// an idle program is read without stopping any thread, and the pause
// (Snapshot.Pause) is zero.
func Capture(pid int, opt live.Options) (*live.Snapshot, *Set, error) {
	exe := fmt.Sprintf("/proc/%d/exe", pid)
	lay, err := goruntime.Open(exe)
	if err != nil {
		return nil, nil, fmt.Errorf("process %d: %w", pid, err)
	}
	bias, mapped, text, err := liveBias(pid, exe)
	if err != nil {
		return nil, nil, err
	}
	// A first read while the process runs sizes and faults in the
	// buffers, so that the read in the pause only copies.
	pre, _ := preRead(live.NewReader(pid), lay, bias)
	if pre != nil {
		pre.prepareReuse(lay.G.Size)
		// A thread that runs a goroutine has its SP on that
		// goroutine's stack, in the Go heap: its copy ends with that
		// stack, not MaxStack bytes into the heap after it.
		opt.StackEnd = pre.stackEnd()
		if opt.Threads == nil && leaveAsleep {
			// Threads asleep in the kernel are not stopped: on a busy
			// machine, waking them to stop was most of the pause.
			opt.LeaveAsleep = pre.leaveAsleep(text)
		}
	}
	// The maps are read before the pause (see live.Options): a Go
	// program maps new memory rarely, and a thread created since the
	// read has them read again in the pause.
	opt.MapsBeforePause = true
	opt.DuringOnTracer = true
	if pre != nil && pre.again != nil {
		// The read in the pause, once just before it, its result
		// dropped (see readAgain): the pause's then runs on warm
		// buffers and caches.
		opt.BeforeStop = func(r *live.Reader) { readAgain(r, lay, bias, pre) }
	}
	if afterPreRead != nil {
		afterPreRead()
	}
	var snap *snapshot
	var rerr error
	var now int64
	var cost copyCost
	var atRead map[int]bool
	var st ReadStats
	opt.During = func(r *live.Reader) {
		// Called again when a thread left asleep ran meanwhile
		// (live.Options.LeaveAsleep): the last read is the one kept.
		atRead = make(map[int]bool, len(r.Threads()))
		for _, th := range r.Threads() {
			atRead[th.TID] = true
		}
		st = ReadStats{}
		cost.start()
		st.clock.start()
		sr := &statReader{rd: r, st: &st, deadline: r.Deadline()}
		snap, rerr = readAll(sr, lay, bias, pre)
		if snap != nil {
			stopRunningAsleep(r, snap)
		}
		var ts unix.Timespec
		if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) == nil {
			now = ts.Nano()
		}
		cost.stop()
	}
	ls, err := live.Capture(pid, opt)
	if err != nil {
		return nil, nil, err
	}
	if snap == nil && rerr == nil {
		rerr = fmt.Errorf("the capture ended before the goroutines were read")
	}
	if rerr != nil {
		return ls, nil, fmt.Errorf("process %d: %w", pid, rerr)
	}
	set := newSet(snap, lay, now, mapped, regs.AMD64)
	set.copyCost = cost
	st.Wall, st.User, st.Sys, st.Faults = cost.wall, cost.user, cost.sys, cost.faults
	st.Again, st.Kept = set.again, set.kept
	st.Goroutines = len(set.Goroutines)
	st.clock = phaseClock{}
	set.ReadStats = st
	if st.Unread > 0 {
		set.Notes = append(set.Notes, fmt.Sprintf("the goroutines' read in the pause reached its bound (--max-pause) with %d ranges left: goroutines and stacks not read by then are missing or shown without a stack", st.Unread))
	}
	for _, th := range ls.Threads {
		if th.Asleep {
			if set.asleep == nil {
				set.asleep = map[int]bool{}
			}
			set.asleep[th.TID] = true
		}
	}
	if ls.Staggered {
		// Threads slow to stop (opt.MaxPause): the goroutines were read
		// with those stopped so far.
		set.atRead = atRead
		late := 0
		for _, th := range ls.Threads {
			if th.Err == nil && !atRead[th.TID] {
				late++
			}
		}
		// A capture can stagger and still have every thread stopped by
		// the read (they stopped before it was made): nothing to say.
		if late > 0 {
			set.Notes = append(set.Notes, fmt.Sprintf("%d threads were slow to stop (--max-pause): the goroutines were read while they still ran or waited for a CPU, those running on them are shown without a stack, and one they woke may be shown as it was before", late))
		}
	}
	return ls, set, nil
}

// stopRunningAsleep asks for the threads left asleep that run a
// goroutine, by what the read found, to be stopped (live.Reader.Stop): a
// goroutine that began to run after the read before the pause, on a
// thread then blocked in the kernel (a page fault, a futex in the
// runtime's locks), unwinds from its thread's registers.
func stopRunningAsleep(r *live.Reader, snap *snapshot) {
	var asleep map[int]bool
	for _, th := range r.Threads() {
		if th.Asleep {
			if asleep == nil {
				asleep = map[int]bool{}
			}
			asleep[th.TID] = true
		}
	}
	for i := range snap.gs {
		if g := &snap.gs[i]; g.status == gRunning && asleep[g.tid] {
			r.Stop(g.tid)
		}
	}
}

// leaveAsleep lets Capture leave threads asleep (live.Options.LeaveAsleep);
// tests turn it off to compare.
var leaveAsleep = true

// afterPreRead, when set (by tests), runs between the read before the
// pause and the pause.
var afterPreRead func()

// copyCost is what copying the goroutines cost in a capture's pause: the
// time, and the CPU time of this process (user and system: the system
// calls' copying is system time) and its page faults over the same
// interval.
type copyCost struct {
	wall, user, sys time.Duration
	faults          int64
	t0              time.Time
}

func (c *copyCost) start() {
	c.t0 = time.Now()
	c.user, c.sys, c.faults = processCPU()
}

func (c *copyCost) stop() {
	c.wall = time.Since(c.t0)
	u, s, f := processCPU()
	c.user, c.sys, c.faults = u-c.user, s-c.sys, f-c.faults
}

// processCPU returns this process's user and system CPU time so far, and
// its page faults.
func processCPU() (user, sys time.Duration, faults int64) {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0, 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano()), ru.Minflt + ru.Majflt
}

// FromCore reads the goroutines of a core file. exe, when not empty,
// replaces the executable path the core names (as corefile's Target).
func FromCore(c *corefile.Core, exe string) (*Set, error) {
	path := c.Exe
	if exe != "" {
		path = exe
	}
	if path == "" {
		return nil, fmt.Errorf("%s: the core names no executable; give it with --exe", c.Path)
	}
	lay, err := goruntime.Open(path)
	if err != nil {
		return nil, err
	}
	var bias uint64
	for _, m := range c.Mappings {
		if m.Path == c.Exe && m.Offset == 0 {
			if f, err := os.Open(path); err == nil {
				bias = linkedBias(f, m.Start)
				f.Close()
			}
			break
		}
	}
	snap, err := readAll(memBatch{c}, lay, bias, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Path, err)
	}
	mapped := c.Exe
	if exe != "" {
		mapped = exe
	}
	return newSet(snap, lay, 0, mapped, c.Arch), nil
}

// liveBias finds the executable's load bias from /proc/PID/maps (0 for
// the usual non-PIE Go binary), the path it is mapped under and its
// executable mappings.
func liveBias(pid int, exe string) (uint64, string, []target.Mapping, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return 0, "", nil, err
	}
	maps, err := procmaps.Parse(raw)
	if err != nil {
		return 0, "", nil, err
	}
	path, _ := os.Readlink(exe)
	path = strings.TrimSuffix(path, " (deleted)")
	var text []target.Mapping
	for _, m := range maps {
		if m.Path == path && strings.Contains(m.Perms, "x") {
			text = append(text, m)
		}
	}
	for _, m := range maps {
		if m.Path == path && m.Offset == 0 {
			f, err := os.Open(exe)
			if err != nil {
				return 0, "", nil, err
			}
			defer f.Close()
			return linkedBias(f, m.Start), path, text, nil
		}
	}
	return 0, path, text, nil
}

func newSet(s *snapshot, lay *goruntime.Layout, now int64, exe string, arch regs.Arch) *Set {
	again := s.prevGs != nil
	s.merge()
	// Sorted here, after the pause: gs come in allgs order, nearly that
	// of their ids.
	slices.SortFunc(s.gs, func(a, b raw) int { return cmp.Compare(a.goid, b.goid) })
	set := &Set{GoVersion: lay.GoVersion, Layout: lay.Source, Notes: s.notes, exe: exe, arch: arch, kept: s.kept,
		again: again}
	for i := range s.gs {
		g := &s.gs[i]
		out := Goroutine{ID: g.goid, Status: "???", Scan: g.scan, WaitMinutes: -1, Thread: g.tid,
			LockedToThread: g.lockedM != 0, Labels: g.labels, ParentID: g.parent, GoPC: g.gopc,
			StartPC: g.startpc, g: g}
		if int(g.status) < len(statusNames) && statusNames[g.status] != "" {
			out.Status = statusNames[g.status]
		}
		if (g.status == gWaiting || g.status == gLeaked) && g.waitReason != 0 {
			if int(g.waitReason) < len(lay.WaitReasons) {
				out.WaitReason = lay.WaitReasons[g.waitReason]
			} else {
				out.WaitReason = "unknown wait reason"
			}
		}
		if now != 0 {
			out.WaitMinutes = 0
			if (g.status == gWaiting || g.status == gSyscall) && g.waitSince != 0 && now > g.waitSince {
				out.WaitMinutes = (now - g.waitSince) / 60e9
			}
		}
		set.Goroutines = append(set.Goroutines, out)
	}
	return set
}

// Contexts returns one target context per goroutine, for the target the
// same capture made (live.Snapshot.Target, corefile.Core.Target): a
// parked goroutine's saved registers over a memory that holds its copied
// stack, a running goroutine's thread registers (when the target has that
// thread). Context.ID is the goroutine id, Context.TID its thread.
func (s *Set) Contexts(tg *target.Target) []target.Context {
	threads := map[int]*target.Context{}
	for i := range tg.Contexts {
		if c := &tg.Contexts[i]; c.Kind == target.KindThread {
			threads[c.TID] = c
		}
	}
	out := make([]target.Context, 0, len(s.Goroutines))
	for i := range s.Goroutines {
		out = append(out, s.context(&s.Goroutines[i], tg, threads))
	}
	return out
}

func (s *Set) context(g *Goroutine, tg *target.Target, threads map[int]*target.Context) target.Context {
	c := target.Context{Kind: target.KindGoroutine, ID: g.ID, HasID: true, TID: g.Thread,
		Name: "goroutine " + strconv.FormatInt(g.ID, 10)}
	r := g.g
	if r.status == gRunning {
		if !s.stoppedAtRead(g.Thread) {
			c.Err = fmt.Errorf("its thread %d was still running when the goroutines were read (--max-pause)", g.Thread)
			return c
		}
		if s.asleep[g.Thread] {
			c.Err = fmt.Errorf("its thread %d was blocked in the kernel, left asleep rather than stopped, and its registers were not read", g.Thread)
			return c
		}
		if th := threads[g.Thread]; th != nil {
			c.Regs = th.Regs
			return c
		}
		c.Err = fmt.Errorf("goroutine %d runs on thread %d, which was not captured", g.ID, g.Thread)
		return c
	}
	pc, sp := r.pc, r.sp
	if r.status == gSyscall && r.syscallSP != 0 {
		pc, sp = r.syscallPC, r.syscallSP
	}
	arch := tg.Arch
	if arch == 0 {
		arch = s.arch
	}
	c.Regs = regs.New(arch)
	c.Regs.Set(arch.PC(), pc)
	c.Regs.Set(arch.SP(), sp)
	c.Regs.Set(arch.FP(), r.bp)
	c.Mem = &target.Snapshot{Regions: []target.Region{r.stack}, Next: tg.Mem}
	return c
}
