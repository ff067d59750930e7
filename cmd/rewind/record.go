package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/perfevent"
	"github.com/rewindstack/rewind/profiles"
)

const recordHelp = `rewind record [flags] -p PID        sample a running process
rewind record [flags] -- CMD ARGS   run CMD and sample it from its exec

Samples every thread (and threads and children created later) with the
cpu-clock event of perf_event_open, copying each sample's user registers
and the top of its user stack (--stack-size bytes; when a process's
samples show deeper stacks the copy doubles while recording, up to the
kernel's 65528, unless --stack-size is given). After recording, rewind
unwinds the copies itself (--method), adds kernel frames from the kernel's
callchain, symbolizes every unique address once, prints per unwind method
the share of samples whose stack reaches the thread's root, and writes the
profile (-o): FILE.pb.gz (pprof), FILE.folded (folded stacks for
flamegraph.pl / speedscope), FILE.html or FILE.svg (flame graph).

Needs perf_event_open permission: root or CAP_PERFMON, or
kernel.perf_event_paranoid <= 2 for your own processes (user frames only;
<= 1 adds kernel frames). Stop with Ctrl-C; the profile is still written.
When -d ends a command rewind started, the command and what it started
get SIGTERM, then SIGKILL after 2 s; with -p the process is left alone.`

// profileFlags are the flags record and report share.
type profileFlags struct {
	out      *string
	method   *string
	maxDepth *int
	quiet    *bool
	fidelity *bool
	fidN     *int
	noCache  *bool
	stats    *bool
	title    *string
	tm       *timings // set when stats is
	// findDebug, when set, finds separate debug files (see locate).
	findDebug func(*elfobj.File) *elfobj.File
	// offCPU marks an off-CPU recording (record --off-cpu).
	offCPU bool
	// copyEdgeHint says how to copy more stack per sample (see
	// profiles.Profile.CopyEdgeHint).
	copyEdgeHint string
	// afterBuild, when set, runs once the profile is built, before the
	// fidelity table is printed.
	afterBuild func()
	// inputErr is why report could not read the whole perf.data file:
	// the profile of the records before it is written, if there are
	// samples among them.
	inputErr error
}

func addProfileFlags(fs *flag.FlagSet) *profileFlags {
	return &profileFlags{
		out:      fs.String("o", "", "write the profile to `FILE`: .pb.gz (pprof), .folded, .html or .svg (default: an HTML flame graph rewind-TIME.html here, rewind-TIME-2.html and so on when that file exists)"),
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
		"each stack weighted by the time its thread was off CPU (needs root or CAP_PERFMON and tracefs)")
	pf := addProfileFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		if len(cmdArgs) == 0 && *pid == 0 {
			cmdArgs = pos // "rewind record ./prog" without "--"
		} else {
			return fmt.Errorf("unexpected argument %q (put the command after --)", pos[0])
		}
	}
	switch {
	case *pid != 0 && len(cmdArgs) > 0:
		return fmt.Errorf("give -p PID or a command, not both")
	case *pid == 0 && len(cmdArgs) == 0:
		return fmt.Errorf("need -p PID or -- CMD ARGS")
	case *pid < 0:
		return fmt.Errorf("bad process ID %d", *pid)
	}
	methods, err := profileMethods(*pf.method, *pf.maxDepth)
	if err != nil {
		return err
	}
	if err := checkFreq(*freq); err != nil {
		return err
	}
	outPath, err := outputPath(*pf.out)
	if err != nil {
		return err
	}
	if err := checkOutputDir(outPath); err != nil {
		return err
	}
	opt := perfevent.Options{Freq: *freq, StackSize: *stackSize, UserOnly: *userOnly, Warn: warn, OffCPU: *offCPU}
	pf.offCPU = *offCPU
	col := profiles.NewCollector(perfevent.Arch())
	col.Warn = warn
	build := newBuilder(col, methods, pf)

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	var rec *perfevent.Recorder
	var cmd *perfevent.Command
	exited := make(chan error, 1)
	if *pid != 0 {
		if err := col.AddProcess(*pid); err != nil {
			return fmt.Errorf("process %d: %w", *pid, err)
		}
		if rec, err = perfevent.AttachPID(*pid, opt); err != nil {
			return err
		}
	} else {
		// The command's orphans (what a script started in the
		// background) become rewind's children, so that the end of the
		// recording can end them too (see endOrphans); those that exit
		// meanwhile are reaped as they do (see reapOrphans).
		unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
		if rec, cmd, err = perfevent.StartCommand(cmdArgs, opt); err != nil {
			return err
		}
		if err := cmd.Release(); err != nil {
			warn(fmt.Sprintf("starting %s: %v", cmdArgs[0], err))
		}
		go func() { exited <- cmd.Wait() }()
	}
	defer rec.Close()

	start := time.Now()
	var deadline <-chan time.Time
	if dur.set {
		deadline = time.After(dur.d)
	}
	tty := isTerminal(2)
	lastProgress := time.Time{}
	// Unless --stack-size was given, the copy grows when samples show a
	// process needs more (see perfevent.Recorder.GrowStack).
	growStack := !flagSet(fs, "stack-size")
	lastGrow := time.Now()
	lastReap := time.Now()
	why := ""
	var cmdErr error
	reaped := false
	pump := &profiles.Pump{Source: rec, Collector: col, Builder: build, PendingLimit: pendingLimit, Warn: warn}
	pump.Check = func(hup bool) string {
		if growStack && time.Since(lastGrow) > time.Second {
			lastGrow = time.Now()
			if size, p, err := rec.GrowStack(); err != nil {
				warn(fmt.Sprintf("copying more stack per sample: %v", err))
				growStack = false
			} else if size > 0 {
				fmt.Fprintf(os.Stderr, "\rrewind: process %d has stacks deeper than the copy: copying %d bytes per sample from now on\n", p, size)
			}
		}
		if cmd != nil && time.Since(lastReap) > 200*time.Millisecond {
			lastReap = time.Now()
			reapOrphans(cmd.Process.Pid)
		}
		if tty && time.Since(lastProgress) > 250*time.Millisecond {
			lastProgress = time.Now()
			fmt.Fprintf(os.Stderr, "\rrewind: %d samples, %d lost, %.1fs ", rec.Samples(), rec.Lost(), time.Since(start).Seconds())
		}
		select {
		case <-sigs:
			return "interrupted"
		case <-deadline:
			return "duration reached"
		case err := <-exited:
			cmdErr, reaped = err, true
			if err != nil {
				return fmt.Sprintf("command exited (%v)", err)
			}
			return "command exited"
		default:
		}
		if *pid != 0 && live.Exited(*pid) {
			return fmt.Sprintf("process %d exited", *pid)
		}
		return ""
	}
	var off *profiles.OffCPU
	if *offCPU {
		f, err := profiles.ReadSwitchFormat()
		if err != nil {
			return err
		}
		// Samples wait for their thread's switch-in to learn their
		// value: they are unwound at the end, not as they come.
		off = profiles.NewOffCPU(col, f, nil)
		pump.Add, pump.Builder = off.Add, nil
	}
	why = pump.Run()
	if off != nil {
		build.Add(off.Flush(perfevent.Now()))
	}
	if tty {
		fmt.Fprint(os.Stderr, "\r\033[K")
	}
	elapsed := time.Since(start)
	if cmd != nil && !reaped {
		// rewind started the command, so the recording's end is its end:
		// SIGTERM (after Ctrl-C it got the terminal's SIGINT already),
		// SIGKILL after a grace period, and reap it. With -p the target
		// is left alone.
		if why != "interrupted" {
			cmd.Process.Signal(syscall.SIGTERM)
		}
		select {
		case <-exited:
		case <-time.After(killGrace):
			cmd.Process.Kill()
			<-exited
		}
		if why != "interrupted" {
			endOrphans(killGrace)
		}
	}
	fmt.Fprintf(os.Stderr, "rewind: %s after %.1fs: %d samples, %d lost\n", why, elapsed.Seconds(), rec.Samples(), rec.Lost())
	if cmdErr != nil && rec.Samples() == 0 {
		return fmt.Errorf("%s failed (%v) before any sample: no profile written", cmdArgs[0], cmdErr)
	}
	switch size := rec.StackSize(); {
	case size >= maxStackCopy && size > *stackSize:
		pf.copyEdgeHint = fmt.Sprintf("the copy grew to %d bytes, the kernel's most, while recording; earlier samples had less", size)
	case size >= maxStackCopy:
		pf.copyEdgeHint = fmt.Sprintf("%d bytes were copied, the kernel's most", size)
	}
	return finishProfile(build, col, pf, 1e9/int64(*freq), recordTitle(pf, *pid, cmdArgs), nil)
}

// pendingLimit bounds the stack copies a recording keeps before it starts
// unwinding them: short recordings are unwound after the target stops, so
// they do not compete with it for CPU.
var pendingLimit = 256 << 20

// endOrphans ends the processes the command left behind when rewind ended
// it: as a subreaper, rewind inherits them when their parents die.
// SIGTERM, SIGKILL after grace, and reaped; it gives up after twice grace
// (a process in uninterruptible sleep), saying so.
func endOrphans(grace time.Duration) {
	start := time.Now()
	for sig := unix.SIGTERM; ; time.Sleep(20 * time.Millisecond) {
		kids := childrenOf(os.Getpid())
		if len(kids) == 0 {
			return
		}
		if time.Since(start) > grace {
			sig = unix.SIGKILL
		}
		if time.Since(start) > 2*grace {
			warn(fmt.Sprintf("processes the command started did not end: %v", kids))
			return
		}
		for _, pid := range kids {
			unix.Kill(pid, sig)
			var ws unix.WaitStatus
			unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		}
	}
}

// reapOrphans reaps the processes rewind inherited as a subreaper (the
// command's orphans) that have exited, so that they do not stay zombies
// until the recording ends. The command itself, keep, is left to its
// Wait: each exited child is looked at first without reaping it, and the
// search stops at the command.
func reapOrphans(keep int) {
	for range 64 {
		var info unix.Siginfo
		if unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil) != nil {
			return
		}
		// si_pid follows si_signo, si_errno, si_code and padding on
		// 64-bit Linux.
		pid := int(*(*int32)(unsafe.Add(unsafe.Pointer(&info), 16)))
		if pid <= 0 || pid == keep {
			return
		}
		var ws unix.WaitStatus
		if n, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); n != pid || err != nil {
			return
		}
	}
}

// childrenOf lists the processes whose parent is pid (from /proc/*/stat).
func childrenOf(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parens.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

// maxStackCopy is the most user stack the kernel copies per sample.
const maxStackCopy = 65528

// killGrace is how long a command rewind started gets between SIGTERM and
// SIGKILL when the recording's duration ends.
var killGrace = 2 * time.Second

func isTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}
