package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rewindstack/rewind/bpfunwind"
	"github.com/rewindstack/rewind/internal/tracefs"
	"github.com/rewindstack/rewind/perfevent"
	"github.com/rewindstack/rewind/profiles"
	"github.com/rewindstack/rewind/session"
)

const unwindInHelp = "unwind user stacks in `WHERE`: kernel (a BPF program walks rewind's unwind tables at sample time and counts " +
	"stacks in the kernel: no stack copies, nothing lost; needs root, or CAP_BPF and CAP_PERFMON), user (stack copies " +
	"unwound by rewind afterwards), or auto: kernel when the BPF programs load, else user with a one-line note"

// unwindInFlag defines --unwind-in.
func unwindInFlag(fs *flag.FlagSet) *string { return fs.String("unwind-in", "auto", unwindInHelp) }

// checkUnwindIn rejects an unknown --unwind-in.
func checkUnwindIn(mode string) error {
	switch mode {
	case "kernel", "user", "auto":
		return nil
	}
	return usagef("--unwind-in %q: want kernel, user or auto", mode)
}

// loadKernelUnwinder loads the in-kernel unwinder for --unwind-in kernel
// or auto; for auto, a failure is one warning line and nil (unwind in user
// space), for kernel it is the error.
func loadKernelUnwinder(mode string, opt bpfunwind.Options) (*bpfunwind.Unwinder, error) {
	if mode == "user" {
		return nil, nil
	}
	// The program follows unmapping with tracepoints, which the ebpf
	// library finds in tracefs: mounted now if it is not (and may be).
	// That it cannot be is said once, among the notes.
	tracefs.Root()
	u, err := bpfunwind.Load(opt)
	if err == nil {
		return u, nil
	}
	msg := bpfLoadError(err)
	if mode == "kernel" {
		return nil, fmt.Errorf("--unwind-in kernel: %s", msg)
	}
	warn("unwinding in user space (--unwind-in auto): " + msg)
	return nil, nil
}

// bpfLoadError is why the BPF unwinder did not load, with how to give
// rewind the privilege when that is why.
func bpfLoadError(err error) string {
	msg := err.Error()
	if strings.Contains(msg, "not permitted") && !strings.Contains(msg, "setcap") {
		msg = strings.TrimSuffix(msg, " (needs root, or CAP_BPF and CAP_PERFMON)") +
			": run rewind as root or give it CAP_BPF and CAP_PERFMON (setcap cap_bpf,cap_perfmon=ep rewind)"
	}
	return msg
}

// kernelRecording is one record run unwound in the kernel.
type kernelRecording struct {
	rf      *recordFlags
	u       *bpfunwind.Unwinder
	col     *profiles.Collector
	cmd     *exec.Cmd
	exit    chan error
	exited  bool  // the command exited by itself, ending the recording
	cmdErr  error // how the command ended, when it failed
	reads   int
	count   uint64    // samples (on-CPU) or blocked intervals (off-CPU)
	started time.Time // when the recording began: -d counts from here
	// progress, when stderr is a terminal, gets a line updated every
	// second.
	progress bool
}

// checkKernelRecord checks what record checks before it opens events:
// the process to attach to exists, --stack-size is one the kernel takes
// (unused in the kernel, but the same command line must work with
// --unwind-in user).
func checkKernelRecord(rf *recordFlags) error {
	if rf.stackSize < 8 || rf.stackSize >= 64<<10 || rf.stackSize%8 != 0 {
		return fmt.Errorf("stack size %d: want a multiple of 8 between 8 and 65528 bytes", rf.stackSize)
	}
	if rf.pid != 0 {
		if err := syscall.Kill(rf.pid, 0); err == syscall.ESRCH {
			return fmt.Errorf("no such process: %d", rf.pid)
		}
	}
	return nil
}

// progressEnd ends the progress line, if one is shown.
func (kr *kernelRecording) progressEnd() string {
	if kr.progress && kr.reads > 0 {
		return "\r\x1b[K"
	}
	return ""
}

// recordKernel runs record with the in-kernel unwinder, or returns
// handled false when --unwind-in chose user space.
func recordKernel(ctx context.Context, rf *recordFlags, methods []profiles.Method) (handled bool, err error) {
	pf := rf.pf
	if err := checkKernelRecord(rf); err != nil {
		return false, err
	}
	col := profiles.NewCollector(perfevent.Arch())
	col.Warn = warn
	build := newBuilder(col, methods, pf) // (sets the tables' cache directory)
	opt := bpfunwind.Options{Objects: col.Objects, Warn: warn, Filter: true, Sizes: bpfunwind.Process}
	if rf.pid != 0 {
		opt.PIDs = []int{rf.pid}
	}
	u, err := loadKernelUnwinder(rf.unwindIn, opt)
	if u == nil || err != nil {
		return false, err
	}
	defer u.Close()
	kr := &kernelRecording{rf: rf, u: u, col: col, progress: isTerminal(2)}
	fmt.Fprintf(os.Stderr, "rewind: unwinding in the kernel (BPF), %s\n", kr.what())
	tracefsStats(pf)
	if err := kr.start(); err != nil {
		return true, err
	}
	why, elapsed := kr.run(ctx)
	if kr.exited && kr.count == 0 {
		fmt.Fprint(os.Stderr, kr.progressEnd())
		kr.notes()
		return true, noSamples(elapsed, kr.cmdErr)
	}
	fmt.Fprintf(os.Stderr, "%srewind: %s after %.1fs: %d samples, 0 lost (counted in the kernel)\n", kr.progressEnd(), why, elapsed.Seconds(), kr.count)
	if d, n := u.ProgramTime(); n > 0 {
		fmt.Fprintf(os.Stderr, "rewind: the BPF unwinder ran %d times, %.1f ms of CPU in all (%.1f µs each)\n", n, float64(d)/1e6, float64(d)/1e3/float64(n))
	}
	kr.notes()
	period := int64(1e9 / rf.freq)
	if err := finishProfile(build, col, pf, period, recordTitle(pf, rf.pid, rf.cmdArgs), nil); err != nil {
		return true, err
	}
	return true, commandStatus(kr.cmdErr)
}

func (kr *kernelRecording) what() string {
	if kr.rf.offCPU {
		return "off-CPU time from sched_switch"
	}
	return fmt.Sprintf("on-CPU samples at %d Hz", kr.rf.freq)
}

// start attaches the program and starts the command (or describes -p's
// process).
func (kr *kernelRecording) start() error {
	var err error
	if kr.rf.offCPU {
		err = kr.u.OffCPU(0)
	} else {
		err = kr.u.OnCPU(kr.rf.freq)
	}
	if err != nil {
		return err
	}
	if kr.rf.pid != 0 {
		kr.started = time.Now()
		return nil
	}
	kr.u.Prewarm(kr.rf.cmdArgs[0])
	// What the command leaves behind is this process's to end.
	unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	// Start returns once the program is exec'd: traced then, its
	// mappings are the program's (a shell held before the exec would be
	// described, and its mappings named in the profile). The process is
	// reaped only after it is traced; one that exited at once (false)
	// has nothing to describe, which is no error.
	kr.cmd = exec.Command(kr.rf.cmdArgs[0], kr.rf.cmdArgs[1:]...)
	kr.cmd.Stdin, kr.cmd.Stdout, kr.cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if *kr.rf.pf.out == "-" {
		// Standard output is the profile's.
		kr.cmd.Stdout = os.Stderr
	}
	// Tied to rewind: the command dies with it, even under kill -9.
	if err := perfevent.StartTied(kr.cmd); err != nil {
		return err
	}
	kr.started = time.Now()
	err = kr.u.Trace(kr.cmd.Process.Pid)
	kr.exit = make(chan error, 1)
	go func() { kr.exit <- kr.cmd.Wait() }()
	if err != nil && !exitedAlready(kr.cmd.Process.Pid) {
		kr.cmd.Process.Kill()
		<-kr.exit
		kr.exit = nil
		return fmt.Errorf("tracing %s: %w", kr.rf.cmdArgs[0], err)
	}
	return nil
}

// exitedAlready reports whether the process pid, a child not reaped yet,
// has exited (it is a zombie) or is gone.
func exitedAlready(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) STATE ...: comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}

// run reads the counts every second until the context, the duration, or
// the end of the command or process.
func (kr *kernelRecording) run(ctx context.Context) (string, time.Duration) {
	start := kr.started
	var timeout <-chan time.Time
	if kr.rf.dur > 0 {
		timeout = time.After(kr.rf.dur - time.Since(start))
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	why := ""
	var ended time.Time // when why was found: the recording's end
	for why == "" {
		select {
		case <-ctx.Done():
			why = "interrupted"
		case <-timeout:
			why = "duration reached"
		case err := <-kr.exit:
			why, kr.exited = "command exited", true
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				why = fmt.Sprintf("command exited (%v)", ee)
				kr.cmdErr = err
			}
			kr.exit = nil
		case <-tick.C:
			if kr.rf.pid != 0 && syscall.Kill(kr.rf.pid, 0) == syscall.ESRCH {
				why = "process exited"
			}
		}
		if why != "" {
			ended = time.Now()
		}
		kr.read()
		if kr.exit != nil {
			session.ReapOrphans(kr.cmd.Process.Pid)
		}
		if kr.progress {
			fmt.Fprintf(os.Stderr, "\rrewind: %d samples, 0 lost, %.1fs", kr.count, time.Since(start).Seconds())
		}
	}
	kr.endCommand(why == "interrupted")
	kr.read()
	return why, ended.Sub(start)
}

// read hands the counts of the period to the collector.
func (kr *kernelRecording) read() {
	stacks, err := kr.u.Read()
	if err != nil {
		warn(fmt.Sprintf("reading the kernel's counts: %v", err))
		return
	}
	periodNS := uint64(1e9 / kr.rf.freq)
	for _, s := range stacks {
		kr.count += s.Events
	}
	kr.u.Feed(kr.col, stacks, perfevent.Now(), periodNS)
	kr.reads++
}

// endCommand ends a command still running when the recording stops: the
// command gets SIGTERM, then SIGKILL after 2 s.
func (kr *kernelRecording) endCommand(interrupted bool) {
	if kr.cmd == nil {
		return
	}
	if kr.exit != nil {
		if !interrupted {
			kr.cmd.Process.Signal(syscall.SIGTERM)
		}
		select {
		case <-kr.exit:
		case <-time.After(session.DefaultKillGrace):
			kr.cmd.Process.Kill()
			<-kr.exit
		}
	}
	if !interrupted {
		session.EndOrphans(session.DefaultKillGrace, warn)
	}
}

// notes prints what the kernel could not count or walk, one line each.
func (kr *kernelRecording) notes() {
	for s, n := range tracefs.FoldNotes(kr.u.Notes()) {
		if n > 1 {
			s = fmt.Sprintf("%s (%d times)", s, n)
		}
		warn(s)
	}
	e := kr.u.Errors()
	if e.CountsFull+e.StacksFull+e.OffCPUFull+e.NoticesLost+e.KStacksFull > 0 {
		warn(fmt.Sprintf("the kernel's maps were full: %d counts, %d stacks, %d off-CPU starts, %d notices, %d kernel stacks not kept",
			e.CountsFull, e.StacksFull, e.OffCPUFull, e.NoticesLost, e.KStacksFull))
	}
}
