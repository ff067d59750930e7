package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rewindstack/rewind/perfevent"
	"github.com/rewindstack/rewind/session"
)

const recordHelp = `rewind record [flags] -p PID        sample a running process
rewind record [flags] -- CMD ARGS   run CMD and sample it from its exec

Samples every thread (and threads and children created later) with the
cpu-clock event of perf_event_open (--off-cpu: where they block) and, by
default, walks each sample's user stack in the kernel when the BPF
unwinder loads (root, or CAP_BPF and CAP_PERFMON): a BPF program walks
rewind's unwind tables at sample time, and the interpreters' own frames
(CPython, LuaJIT, Ruby: shown above the native frame that runs them),
and counts the stacks there: no stack copies, nothing lost. When it cannot load, record says so in one line and does
as --unwind-in user does: it copies each sample's user registers and the
top of its user stack (--stack-size bytes; when a process's samples show
deeper stacks the copy doubles while recording, up to the kernel's
65528, unless --stack-size is given) and unwinds the copies itself
afterwards (--method; Python and Ruby frames are read from the process
as each sample is read, a fraction of a millisecond after it, and the
fidelity table says how many were late or torn; LuaJIT's need the kernel
walk, and a line says so; where BPF loads, a small
program also copies, for a sample on a Go thread's system stack, the
goroutine's g and stack, so that Go stacks cross runtime.morestack and
runtime.systemstack as Go's own profiler shows them). Either way rewind adds kernel
frames from the kernel's callchain, symbolizes every unique address
once, prints per unwind method the share of samples whose stack reaches
the thread's root, and writes the profile (-o): FILE.pb.gz (pprof),
FILE.folded (folded stacks for flamegraph.pl / speedscope), FILE.html or
FILE.svg (flame graph).

Needs perf_event_open permission: root or CAP_PERFMON, or
kernel.perf_event_paranoid <= 2 for your own processes (user frames only;
<= 1 adds kernel frames). Stop with Ctrl-C; the profile is still written.
When -d ends a command rewind started, the command and what it started
get SIGTERM, then SIGKILL after 2 s; with -p the process is left alone.
When the command exits by itself, record exits with its status.`

// profileFlags are the flags record and report share.
type profileFlags struct {
	out      *string
	format   *string
	method   *string
	maxDepth *int
	quiet    *bool
	fidelity *bool
	fidN     *int
	noCache  *bool
	stats    *bool
	title    *string
	tm       *timings // set when stats is
}

func addProfileFlags(fs *flag.FlagSet) *profileFlags {
	return &profileFlags{
		out: fs.String("o", "", "write the profile to `FILE`: .pb.gz (pprof), .folded, .html or .svg (default: an HTML flame graph rewind-TIME.html here, rewind-TIME-2.html and so on when that file exists); "+
			"- writes it to standard output, in the --format given; /dev/null discards it"),
		format:   fs.String("format", "", "the profile's `FORMAT` with -o - (standard output has no extension to name it): pprof, folded, html or svg"),
		method:   methodFlag(fs),
		maxDepth: fs.Int("max-depth", 1024, "stop each walk after `N` frames"),
		quiet:    fs.Bool("q", false, "do not print the fidelity statistics"),
		fidelity: fs.Bool("fidelity", true, "unwind samples with every method (auto, dwarf, sframe, fp) for the fidelity table; "+
			"with --fidelity=false only --method runs"),
		fidN: fs.Int("fidelity-samples", 1000, "when there are more samples than `N`, the methods other than --method walk every k-th sample "+
			"for the fidelity table (the table says so); 0: every sample"),
		stats:   fs.Bool("stats", false, "print the time of each phase to stderr"),
		title:   fs.String("title", "", "the flame graph's `TITLE` (default: rewind and the command's name, without its arguments)"),
		noCache: fs.Bool("no-cache", false, "do not read or write the persistent caches of unwind tables, DWARF indexes and kernel symbols ("+cacheDirHelp+")"),
	}
}

func runRecord(args []string) error {
	surviveBrokenPipe()
	rf, err := parseRecordFlags(args)
	if err != nil {
		return err
	}
	methods, err := session.Methods(*rf.pf.method, *rf.pf.maxDepth)
	if err != nil {
		return err
	}
	outPath, err := outputPath(*rf.pf.out, *rf.pf.format)
	if err != nil {
		return err
	}
	if err := checkOutputDir(outPath); err != nil {
		return err
	}
	// Ctrl-C or SIGTERM ends the recording; the profile is still written.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(rf.cmdArgs) > 0 {
		// Before the BPF programs load: a program that cannot be run
		// is one line, and the shell's status.
		if err := perfevent.Runnable(rf.cmdArgs[0]); err != nil {
			return err
		}
	}
	r := &session.Recording{PID: rf.pid, Argv: rf.cmdArgs, Freq: rf.freq, Duration: rf.dur, StackSize: rf.stackSize, GrowStack: rf.growStack,
		UserOnly: rf.userOnly, OffCPU: rf.offCPU, UnwindIn: rf.unwindIn, PendingLimit: pendingLimit}
	if err := session.CheckRecording(r); err != nil {
		return err
	}
	r.Profile = rf.pf.options(methods)
	r.Profile.Title = recordTitle(rf.pf, rf.pid, rf.cmdArgs)
	if outPath == "-" {
		// Standard output is the profile's: the command's output goes
		// to standard error.
		r.CommandStdout = os.Stderr
	}
	if isTerminal(2) {
		r.Progress = os.Stderr
	}
	res, err := session.Record(ctx, r)
	if err != nil {
		return err
	}
	return commandStatus(res.CommandErr)
}

// exitStatus is an error that is only an exit status: record -- CMD exits
// with the status of a CMD that failed, as perf record does, having said
// what there was to say.
type exitStatus int

func (e exitStatus) Error() string   { return "" }
func (e exitStatus) ExitStatus() int { return int(e) }

// commandStatus returns the exit status error of a command that exited
// with err (nil when it succeeded): its exit code, or 128 plus the signal
// that killed it, as a shell's $?.
func commandStatus(err error) error {
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return err
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitStatus(128 + int(ws.Signal()))
	}
	if code := ee.ExitCode(); code > 0 {
		return exitStatus(code)
	}
	return exitStatus(1)
}

// recordFlags is rewind record's command line.
type recordFlags struct {
	pid       int
	cmdArgs   []string
	freq      int
	dur       time.Duration // 0: until the command or process exits
	stackSize int
	growStack bool // --stack-size was not given
	userOnly  bool
	offCPU    bool
	unwindIn  string // --unwind-in: kernel, user or auto
	pf        *profileFlags
}

// parseRecordFlags parses and checks rewind record's arguments.
func parseRecordFlags(args []string) (*recordFlags, error) {
	var cmdArgs []string
	for i, a := range args {
		if a == "--" {
			args, cmdArgs = args[:i], args[i+1:]
			break
		}
	}
	fs := newFlags("record", recordHelp)
	pid := fs.Int("p", 0, "record the running process `PID`")
	freq := fs.Int("F", 99, "sampling frequency in `HZ` per thread")
	dur := new(durationFlag)
	fs.Var(dur, "d", "stop after `DURATION`: seconds (5) or a Go duration (1.5s, 2m) (default: until Ctrl-C or the command or process exits)")
	stackSize := fs.Int("stack-size", 16<<10, "`BYTES` of user stack copied per sample (a multiple of 8, below 65536); "+
		"unless given, the copy doubles (up to 65528) when a process's samples show deeper stacks")
	userOnly := fs.Bool("user-only", false, "do not record kernel frames")
	offCPU := fs.Bool("off-cpu", false, "record where threads block instead of where they run: the sched_switch tracepoint with stack copies, "+
		"each stack weighted by the time its thread was off CPU (needs root or CAP_PERFMON, and tracefs: as root, rewind mounts it when it is not)")
	unwindIn := unwindInFlag(fs)
	pf := addProfileFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	if len(pos) > 0 {
		if len(cmdArgs) == 0 && *pid == 0 {
			cmdArgs = pos // "rewind record ./prog" without "--"
		} else {
			return nil, fmt.Errorf("unexpected argument %q (put the command after --)", pos[0])
		}
	}
	switch {
	case *pid != 0 && len(cmdArgs) > 0:
		return nil, usagef("give -p PID or a command, not both")
	case *pid == 0 && len(cmdArgs) == 0:
		return nil, usagef("need -p PID or -- CMD ARGS")
	case *pid < 0:
		return nil, fmt.Errorf("bad process ID %d", *pid)
	}
	if err := checkFreq(*freq); err != nil {
		return nil, err
	}
	if err := checkUnwindIn(*unwindIn); err != nil {
		return nil, err
	}
	// Unless --stack-size was given, the copy grows when samples show a
	// process needs more (see perfevent.Recorder.GrowStack).
	return &recordFlags{pid: *pid, cmdArgs: cmdArgs, freq: *freq, dur: dur.d, stackSize: *stackSize, growStack: !flagSet(fs, "stack-size"),
		userOnly: *userOnly, offCPU: *offCPU, unwindIn: *unwindIn, pf: pf}, nil
}

// surviveBrokenPipe keeps rewind alive when stdout or stderr is a pipe
// whose reader is gone (rewind record 2>&1 | head -1): the profile is the
// product, and Go would otherwise die of SIGPIPE on the next line it
// writes there. A write to a broken pipe then fails with EPIPE, and the
// lines are lost. Notify, not Ignore: an ignored SIGPIPE would be
// inherited by the command rewind starts, a handled one is not.
func surviveBrokenPipe() {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
}

// pendingLimit bounds the stack copies a recording keeps before it starts
// unwinding them: short recordings are unwound after the target stops, so
// they do not compete with it for CPU.
var pendingLimit = 256 << 20

func isTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}
