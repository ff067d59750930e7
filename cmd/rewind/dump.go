package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"

	"github.com/rewindstack/rewind/corefile"
	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/fibers"
	"github.com/rewindstack/rewind/internal/fileerr"
	"github.com/rewindstack/rewind/internal/procmaps"
	"github.com/rewindstack/rewind/internal/textesc"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/output"
	"github.com/rewindstack/rewind/runtimes"
	_ "github.com/rewindstack/rewind/runtimes/builtin" // every runtime rewind ships, in runtimes.All
	"github.com/rewindstack/rewind/stacks"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
)

var dumpHelp = `rewind dump PID [flags]            every thread of a running process
rewind dump --core FILE [flags]    every thread of an ELF core file

A live process is frozen only while rewind copies each thread's registers
and stack (PTRACE_SEIZE + INTERRUPT, process_vm_readv, detach); unwinding
and symbolization happen afterwards from the copies, and the pause is
printed. With --lazy the threads stay stopped while rewind unwinds, reading
memory on demand: slower for the target, but no stack is cut at --max-stack.

Frames show the PC (the current PC for frame #0, the return address for
callers, as eu-stack and gdb print them), function+offset, module,
file:line where debug information exists, and the method that found the
frame; each thread ends with the reason its walk stopped.

Compiled unwind tables and DWARF indexes are kept per build-id in a
persistent cache (` + cacheDirHelp + `).
A dump reads only the part of a library's debug information its frames
need (found by .debug_aranges; for libc with libc6-dbg, tens of
milliseconds the first time) and adds it to the cache, so later dumps
of the same code read none; --stats shows where the time goes, --no-cache
bypasses the cache.

With --goroutines (a Go program, Go 1.22 or later, with or without DWARF
and symbols) the goroutines are listed instead, in Go's own traceback
format (--json: a "goroutines" list; --group: identical stacks folded,
the count and ids in the first one's header, with --json a "groups"
list; --labels: the pprof labels in the headers, in the syntax of the Go
version that built the target); a live process is paused once for its
threads and goroutines together, within --max-pause.

With --fibers, every inactive fiber of a runtime rewind recognizes
(Tarantool: every cord's fibers, found through its DWARF types) is
unwound too and listed under its thread, headed "fiber ID NAME (KIND,
context 0x...)" (--json: a "fibers" list; --group folds identical fiber
stacks). With --fiber KIND@ADDR (repeatable) the inactive fiber or
coroutine whose context is saved at ADDR is unwound too, listed after the
threads under "Fibers of no known thread"; --fiber-scan finds such
contexts by itself (see package fibers for the rules): KIND is ucontext
(a glibc ucontext_t at ADDR), fcontext (ADDR holds a boost.context
fcontext_t; the record's layout is read from the process's jump_fcontext),
coro (ADDR holds a libcoro coro_context), jmpbuf (a glibc jmp_buf, its
mangled registers demangled with the process's pointer guard), or
regs@pc=ADDR,sp=ADDR[,fp=ADDR]. A live target's contexts and the used part
of each fiber's stack are copied in the same pause as the threads.

A CPython 3.11-3.14 process (python3.N or libpython3.N.so mapped; a
live one through /proc/PID/root, so in a container too) or core has
every thread's Python frames shown where they run: the frames one
evaluation-loop activation runs, innermost first, just above its
_PyEval_EvalFrameDefault frame, as "qualname (file:line) [python]"
(--json: method "python", null pc, module and offset). A live target's
frame chains are read in the threads' pause. --no-python leaves them out;
an unknown version or build is a one-line note, native frames only.

Needs ptrace permission over the target: root, CAP_SYS_PTRACE, or
kernel.yama.ptrace_scope=0 for processes of the same user.
` + locateHelp

func runDump(args []string) error {
	fs := newFlags("dump", dumpHelp)
	core := fs.String("core", "", "read the ELF core `FILE` instead of a live process")
	lf := addLocateFlags(fs, true)
	method := methodFlag(fs)
	maxDepth := fs.Int("max-depth", 1024, "stop each walk after `N` frames")
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	group := fs.Bool("group", false, "print identical stacks once, with the threads that share them (with --json: a \"groups\" list)")
	threads := fs.String("threads", "", "only these thread IDs (`TID,...`)")
	lazy := fs.Bool("lazy", false, "unwind while the threads are stopped, reading memory on demand")
	maxStopped := fs.Duration("max-stopped", live.DefaultMaxStopped, "with --lazy, resume the threads and fail when unwinding them takes longer than `DUR`")
	maxStack := fs.Int("max-stack", 512<<10, "`BYTES` of stack copied per thread")
	maxPause := newPauseFlag(fs, "max-pause", live.DefaultMaxPause, "when threads are slow to stop (a busy machine), copy and resume the others after `DUR` and each late one as it stops, so no thread is stopped much longer; the dump is then not of one instant (-1 waits for every thread; ignored with --lazy; with --fibers, threads are waited for; with --goroutines, those running on a late thread are listed without a stack). Python stacks and fibers re-read in the pause keep what was read just before it, with a note, when the re-read would pass DUR")
	noInlines := fs.Bool("no-inlines", false, "list physical frames only (as eu-stack without -i)")
	tailCalls := fs.Bool("tail-calls", false, "also list the functions that left by a tail call, where DWARF call-site information tells them for sure (as gdb does), marked [tail-call]")
	noCache := fs.Bool("no-cache", false, "do not read or write the symbolization cache ("+cacheDirHelp+")")
	stats := fs.Bool("stats", false, "print the time of each phase (capture, unwind, symbolize) and how long the target was stopped (slowest threads named) to stderr")
	goroutines := fs.Bool("goroutines", false, "list the goroutines of a Go program (Go 1.22 or later) in Go's traceback format")
	labels := fs.Bool("labels", false, "with --goroutines, print each goroutine's pprof labels in its header as the target's Go version prints them with GODEBUG=tracebacklabels=1 (Go 1.26: in the brackets; 1.27: after them)")
	allFibers := fs.Bool("fibers", false, "also list every inactive fiber of the runtimes rewind recognizes (Tarantool), under its thread")
	fiberScan := fs.Bool("fiber-scan", false, "also search the process's (or core's) writable memory for saved contexts (ucontext_t, jmp_buf, libcoro, boost fcontext) of stacks no thread runs on, and unwind them")
	fiberScanTime := fs.Duration("fiber-scan-time", fibers.DefaultScanTime, "with --fiber-scan, stop searching after `DUR` (and after 512 MiB of writable memory, read or unreadable), saying on stderr what was left unscanned")
	stop := fs.Bool("stop", false, "stop every thread to read it, as gdb and eu-stack do; by default the threads blocked in the kernel are read in place, without stopping them, by a BPF task iterator (root, or CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE; kernel 5.15 or later), and only the others are stopped")
	noRuntime := runtimeFlags(fs)
	var fiberFlags pathsFlag
	fs.Var(&fiberFlags, "fiber", "also unwind the fiber whose context is saved as `KIND@ADDR` (ucontext, fcontext, coro, jmpbuf; or regs@pc=,sp=,fp=); repeatable")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	specs, err := parseFiberSpecs(fiberFlags)
	if err != nil {
		return err
	}
	u, err := unwinderFor(*method, *maxDepth)
	if err != nil {
		return err
	}
	tids, err := parseTIDs(*threads)
	if err != nil {
		return err
	}
	opt := stacks.Options{Unwinder: u, Threads: tids}
	sym, objs, tm, finish := dumpSetup(*noInlines, *tailCalls, *noCache, *stats)
	defer finish()
	if *goroutines {
		return dumpGoroutines(goroutineDump{core: *core, lf: lf, pos: pos, maxStack: *maxStack, maxPause: *maxPause,
			json: *asJSON, group: *group, labels: *labels, objs: objs, u: u, sym: sym, tm: tm})
	}
	if *labels {
		return usagef("--labels applies to --goroutines only")
	}
	var rep *output.Report
	switch {
	case *core != "" && len(pos) == 0:
		if rep, err = dumpCore(*core, lf, objs, opt, fiberReq{specs, *allFibers, *fiberScan, fibers.ScanLimits{MaxTime: *fiberScanTime}, noRuntime.wanted()}, sym, tm); err != nil {
			return err
		}
	case *core == "" && len(pos) == 1:
		pid, err := livePID(pos[0], lf)
		if err != nil {
			return err
		}
		tables := *method == "auto" || *method == "dwarf" // walks read unwind tables
		lopt, unload := inPlaceOptions(live.Options{MaxStack: *maxStack, MaxStopped: *maxStopped, MaxPause: *maxPause}, !*stop && !*lazy && tids == nil)
		defer unload()
		if rep, lf.inputErr = dumpLive(pid, *lazy, tables, lopt, objs, opt, fiberReq{specs, *allFibers, *fiberScan, fibers.ScanLimits{MaxTime: *fiberScanTime}, noRuntime.wanted()}, sym, tm); rep == nil {
			return lf.inputErr
		}
	case *core != "" && len(pos) > 0:
		return usagef("give one PID or --core FILE, not both")
	default:
		return dumpArgsError(len(pos))
	}
	if err := writeDump(rep, *asJSON, *group); err != nil {
		return err
	}
	tm.mark("output")
	return lf.inputErr
}

// dumpArgsError is the usage error of a dump given n arguments that are
// not one PID or a core.
func dumpArgsError(n int) error {
	if n > 1 {
		return usagef("need one PID, not %d arguments (rewind dump --help lists the flags)", n)
	}
	return usagef("need a PID or --core FILE (rewind dump --help lists the flags)")
}

// parseFiberSpecs parses the --fiber flags.
func parseFiberSpecs(flags []string) ([]fibers.Spec, error) {
	var specs []fibers.Spec
	for _, f := range flags {
		sp, err := fibers.ParseSpec(f)
		if err != nil {
			return nil, err
		}
		specs = append(specs, sp)
	}
	return specs, nil
}

// dumpSetup makes a dump's symbolizer (listing inlined calls unless
// noInlines, tail calls with tailCalls), objects (both with the persistent
// cache unless noCache) and timings (when stats); finish saves what the
// dump read to the cache and prints the timings and cache notes.
func dumpSetup(noInlines, tailCalls, noCache, stats bool) (sym *symbolize.Symbolizer, objs *target.Objects, tm *timings, finish func()) {
	// Inlined calls are listed (marked) above the frame they were inlined
	// into, as eu-stack -i and gdb show them.
	sym = &symbolize.Symbolizer{Inlines: !noInlines, TailCalls: tailCalls}
	// Large sections mapped rather than copied: fewer pages touched
	// (a dump is short-lived; see elfobj.MapSections).
	elfobj.MapSections(true)
	symbolize.BuffersOutsideHeap(true)
	objs = &target.Objects{}
	// Unwind tables of the FDEs the frames are in, not whole objects.
	objs.Tables.Partial = true
	if dir := cacheDir(noCache); dir != "" {
		// A dump reads as little DWARF as its frames need, and keeps it.
		sym.Cache = symbolize.NewIncrementalCache(dir)
		objs.Tables.Dir = dir
		objs.Tables.SaveLater = true // written while the dump goes on
	}
	if stats {
		tm = newTimings()
	}
	return sym, objs, tm, func() {
		// What the symbolizer read of debug files goes to the cache
		// once the stacks are out, beside the unwind tables.
		earlyDone.Wait() // what the early work read is saved too
		saved := make(chan struct{})
		go func() { objs.Tables.Wait(); close(saved) }()
		sym.Flush()
		<-saved
		tm.mark("save")
		if stats {
			tm.print()
		}
		printCacheNotes(stats)
	}
}

func writeDump(rep *output.Report, asJSON, group bool) error {
	switch {
	case asJSON && group:
		return output.WriteGroupedJSON(os.Stdout, rep)
	case asJSON:
		return output.WriteJSON(os.Stdout, rep)
	case group:
		return output.WriteGrouped(os.Stdout, rep)
	}
	return output.WriteText(os.Stdout, rep)
}

// fiberReq is what the fiber flags ask for: explicit contexts, and every
// fiber of a recognized runtime.
type fiberReq struct {
	specs []fibers.Spec
	auto  bool
	scan  bool
	lim   fibers.ScanLimits
	// runtimes: the language runtimes whose frames are read too (those
	// no --no-NAME flag left out).
	runtimes []runtimes.Runtime
}

func (r fiberReq) any() bool { return len(r.specs) > 0 || r.auto || r.scan }

func dumpCore(path string, lf *locateFlags, objs *target.Objects, opt stacks.Options, fr fiberReq, sym *symbolize.Symbolizer, tm *timings) (*output.Report, error) {
	c, err := corefile.Open(path)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	exe, err := lf.setupCore(c, objs, sym)
	if err != nil {
		return nil, err
	}
	tg, err := c.Target(objs, exe, lf.unnamedFiles(c)...)
	if err != nil {
		return nil, err
	}
	tm.mark("open")
	var found []fibers.Spec
	if fr.scan {
		var st fibers.ScanStats
		if found, st, err = fibers.ScanCore(tg, c.AnonymousSegments(), fr.lim); err != nil {
			return nil, err
		}
		if n := st.Note(); n != "" {
			warn(n)
		}
		fr.specs = append(fr.specs, found...)
	}
	preload(sym, tg) // on the other core, while unwinding
	if fr.any() {
		tg.Contexts = append(tg.Contexts, fibers.FromCore(tg, fr.specs, fr.auto, warn)...)
	}
	for _, r := range fr.runtimes {
		r.Core(tg, warn)
	}
	walks := fibers.DropPhantoms(stacks.Walk(tg, opt), found)
	tm.mark("unwind")
	warnUnreadable(tg.Space, walks)
	rep := stacks.Report(tg, walks, sym)
	tm.mark("symbolize")
	return rep, nil
}

// livePID parses a dump's PID argument, with the flags a live dump takes.
func livePID(arg string, lf *locateFlags) (int, error) {
	pid, err := strconv.Atoi(arg)
	if err != nil || pid <= 0 {
		return 0, usagef("%q is not a process ID", arg)
	}
	if len(lf.exes) > 0 {
		return 0, usagef("--exe applies to --core only")
	}
	return pid, nil
}

// dumpLive captures process pid with lopt (its Threads from opt) and
// unwinds it. When the process exits after some threads were copied, it
// returns their report and the error wrapping live.ErrExited: what was
// copied is dumped, and the error is the command's. Unless lazy, the
// objects are opened while the process is being stopped (see
// earlyOpen; tables: the walks read unwind tables).
func dumpLive(pid int, lazy, tables bool, lopt live.Options, objs *target.Objects, opt stacks.Options, fr fiberReq, sym *symbolize.Symbolizer, tm *timings) (_ *output.Report, rerr error) {
	lopt.Threads = opt.Threads
	fc, found, err := liveFibers(pid, fr, &lopt)
	if err != nil {
		return nil, err
	}
	maps, _ := procmaps.Read(pid) // nil: the capture says why
	rts := liveRuntimes(pid, fr.runtimes, maps)
	lopt.During = runtimes.During(lopt.During, rts) // after the fibers' own
	addFibers := func(tg *target.Target) {
		if fc != nil {
			tg.Contexts = append(tg.Contexts, fc.Contexts(tg, warn)...)
		}
		for _, l := range rts {
			l.Attach(tg, warn)
		}
	}
	var tg *target.Target
	var walks []stacks.Walked
	var snap *live.Snapshot
	if lazy {
		err = live.WithStopped(pid, lopt, func(s *live.Snapshot) error {
			snap = s
			if fc != nil {
				fc.During(s.Reader()) // WithStopped has no During: the threads are stopped now
			}
			for _, l := range rts {
				l.During(s.Reader())
			}
			tg = s.Target(objs, warn)
			addFibers(tg)
			walks = fibers.DropPhantoms(stacks.Walk(tg, opt), found)
			return nil
		})
		tm.mark("capture+unwind")
	} else {
		early := startEarly(pid, objs, sym, tables, maps)
		snap, err = live.Capture(pid, lopt)
		early.captured()
		tm.mark("capture")
		var exitErr error
		if errors.Is(err, live.ErrExited) && snap != nil && len(snap.Threads) > 0 {
			// Exited during the capture: what was copied is dumped, and
			// the error said after it.
			exitErr, err = err, nil
		}
		defer func() {
			if exitErr != nil && rerr == nil {
				rerr = exitErr
			}
		}()
		if err == nil {
			early.settle(snap, objs)
			tg = snap.Target(objs, warn)
			tm.mark("open")
			preload(sym, tg) // on the other core, while unwinding
			addFibers(tg)
			walks = fibers.DropPhantoms(stacks.Walk(tg, opt), found)
			tm.mark("unwind")
		}
	}
	if err != nil {
		return nil, err
	}
	warnUnreadable(tg.Space, walks)
	rep := stacks.Report(tg, walks, sym)
	tm.mark("symbolize")
	pause := snap.Pause.Microseconds()
	rep.PauseUS = &pause
	tm.pause(snap)
	return rep, nil
}

// liveFibers scans process pid for fibers when asked (the specs found are
// returned, to drop phantom walks) and returns the copier of the fibers'
// stacks, set up in lopt, or nil when no fibers are asked for.
func liveFibers(pid int, fr fiberReq, lopt *live.Options) (*fibers.Copier, []fibers.Spec, error) {
	var found []fibers.Spec
	if fr.scan {
		var st fibers.ScanStats
		var err error
		if found, st, err = fibers.ScanLive(pid, fr.lim); err != nil {
			return nil, nil, err
		}
		if n := st.Note(); n != "" {
			warn(n)
		}
		fr.specs = append(fr.specs, found...)
	}
	if !fr.any() {
		return nil, found, nil
	}
	fc := fibers.NewCopier(pid, fr.specs, fr.auto, warn)
	fc.Apply(lopt)
	return fc, found, nil
}

// preload has the symbolizer start reading, in the background, what the
// frames will need, beginning with each thread's current PC.
func preload(sym *symbolize.Symbolizer, tg *target.Target) {
	var starts []symbolize.Want
	for i := range tg.Contexts {
		c := &tg.Contexts[i]
		if pc, ok := c.Regs.PC(); ok && c.Err == nil {
			starts = append(starts, symbolize.Want{Map: tg.Space.Find(pc), PC: pc, Exact: true})
		}
	}
	sym.Preload(starts)
}

func warn(msg string) { fmt.Fprintf(os.Stderr, "rewind: warning: %s\n", textesc.String(msg)) }

// warnUnreadable tells the user about mapped objects that could not be
// opened: their frames print as addresses only. A file that is no ELF
// object at all, in a mapping whose permissions are unknown (gcore leaves
// read-only file mappings out of the core, so a locale archive looks like
// code), is data: it is said only when a frame of walks lands in it.
func warnUnreadable(space *target.AddressSpace, walks []stacks.Walked) {
	hit := map[string]bool{}
	for i := range walks {
		for _, f := range walks[i].Stack.Frames {
			if f.Map != nil {
				hit[f.Map.Path] = true
			}
		}
	}
	seen := map[string]bool{}
	for _, m := range space.Mappings() {
		if m.Module == nil || m.Module.File != nil || seen[m.Path] {
			continue
		}
		seen[m.Path] = true
		if m.Perms == "" && notELF(m.Module.Err) && !hit[m.Path] {
			continue
		}
		warn(fmt.Sprintf("%v (frames in it print as addresses)", m.Module.Err))
	}
}

// notELF reports whether err says a file is not an ELF object at all (its
// header is not one), rather than missing, unreadable or damaged.
func notELF(err error) bool {
	var fe *fileerr.FormatError
	return errors.As(err, &fe) && fe.Pkg == "elfobj" && fe.Section == "ELF header" && fe.Offset == 0
}

// liveRuntimes finds each of rts in process pid, whose mappings are maps
// (nil: unreadable, and the capture says why), and returns the readers of
// those it runs, ready for the pause.
func liveRuntimes(pid int, rts []runtimes.Runtime, maps []target.Mapping) []runtimes.Live {
	var out []runtimes.Live
	for _, r := range rts {
		l, err := r.Live(pid, maps)
		if err != nil {
			warn(err.Error())
		}
		if l != nil {
			out = append(out, l)
		}
	}
	return out
}

// noRuntimes holds the --no-NAME flag of each registered runtime.
type noRuntimes map[string]*bool

// runtimeFlags defines a --no-NAME flag for each registered runtime.
func runtimeFlags(fs *flag.FlagSet) noRuntimes {
	no := noRuntimes{}
	for _, r := range runtimes.All() {
		no[r.Name()] = fs.Bool("no-"+r.Name(), false, r.Usage())
	}
	return no
}

// wanted returns the runtimes no flag left out, in registry order.
func (no noRuntimes) wanted() []runtimes.Runtime {
	var out []runtimes.Runtime
	for _, r := range runtimes.All() {
		if p := no[r.Name()]; p == nil || !*p {
			out = append(out, r)
		}
	}
	return out
}
