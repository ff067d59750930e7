package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"

	"github.com/rewindstack/rewind/dump"
	"github.com/rewindstack/rewind/fibers"
	"github.com/rewindstack/rewind/internal/textesc"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/output"
	"github.com/rewindstack/rewind/runtimes"
	_ "github.com/rewindstack/rewind/runtimes/builtin" // every runtime rewind ships, in runtimes.All
	"github.com/rewindstack/rewind/session"
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

The same goes for LuaJIT 2.1 (luajit, libluajit-5.1.so, Tarantool,
OpenResty; stripped or not: "name (chunk:line) [lua]" as debug.traceback
names them, with --fibers each suspended coroutine as a fiber; --no-lua)
and Ruby 3.0-3.4 (libruby or a ruby executable: "label (path:line)
[ruby]" as caller_locations gives them, above rb_vm_exec; --no-ruby).

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
	opt, tm, finish := dumpOptions(*noInlines, *tailCalls, *noCache, *stats)
	defer finish()
	opt.Unwinder, opt.Threads, opt.Resolver = u, tids, lf.resolver
	opt.MaxStack, opt.MaxStopped, opt.MaxPause = *maxStack, *maxStopped, *maxPause
	opt.Lazy, opt.Stop = *lazy, *stop
	opt.Fibers, opt.AllFibers, opt.FiberScan = specs, *allFibers, *fiberScan
	opt.FiberScanLimits = fibers.ScanLimits{MaxTime: *fiberScanTime}
	opt.NoRuntimes = noRuntime.left()
	if *goroutines {
		return dumpGoroutines(opt, *core, pos, goroutineWriter(*asJSON, *group, *labels))
	}
	if *labels {
		return usagef("--labels applies to --goroutines only")
	}
	rep, inputErr := dumpThreads(opt, *core, pos, lf)
	if rep == nil {
		return inputErr
	}
	if err := writeDump(rep, *asJSON, *group); err != nil {
		return err
	}
	tm.mark("output")
	return inputErr
}

// dumpThreads dumps the threads of the core or the one process pos names.
// A nil report comes with the command's error; a report may come with an
// error to return after it is written (a damaged core, a process that
// exited during the capture).
func dumpThreads(opt dump.Options, core string, pos []string, lf *locateFlags) (*output.Report, error) {
	switch {
	case core != "" && len(pos) == 0:
		return dump.Core(core, opt)
	case core == "" && len(pos) == 1:
		pid, err := livePID(pos[0], lf)
		if err != nil {
			return nil, err
		}
		return dump.Live(pid, opt)
	case core != "" && len(pos) > 0:
		return nil, usagef("give one PID or --core FILE, not both")
	}
	return nil, dumpArgsError(len(pos))
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

// dumpOptions returns the options every dump command line shares: the
// symbolizer's (inlined calls listed unless noInlines, tail calls with
// tailCalls), the persistent cache unless noCache, the process-wide
// settings of a short-lived process, warnings and timings (when stats).
// finish saves what the dump read to the cache once the output is out and
// prints the timings and cache notes.
func dumpOptions(noInlines, tailCalls, noCache, stats bool) (opt dump.Options, tm *timings, finish func()) {
	if stats {
		tm = newTimings()
	}
	pending := &dump.Pending{}
	opt = dump.Options{
		NoInlines: noInlines, TailCalls: tailCalls,
		// Large sections mapped rather than copied: fewer pages touched
		// (a dump is short-lived; see elfobj.MapSections).
		MapSections: true, BuffersOutsideHeap: true,
		CacheDir: cacheDir(noCache),
		Warn:     warn, Phase: tm.mark, Pending: pending,
		Paused: tm.pause,
		InPlaceUnavailable: func(why string) {
			fmt.Fprintf(os.Stderr, "rewind: every thread is stopped to be read: reading blocked threads in place needs BPF (%s); --stop asks for the stop and hides this line\n", textesc.String(why))
		},
	}
	return opt, tm, func() {
		pending.Wait()
		tm.mark("save")
		if stats {
			tm.print()
		}
		session.CacheNotes(stats, warn, os.Stderr)
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

func warn(msg string) { fmt.Fprintf(os.Stderr, "rewind: warning: %s\n", textesc.String(msg)) }

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

// left returns the names of the runtimes a flag left out, in registry
// order.
func (no noRuntimes) left() []string {
	var out []string
	for _, r := range runtimes.All() {
		if p := no[r.Name()]; p != nil && *p {
			out = append(out, r.Name())
		}
	}
	return out
}
