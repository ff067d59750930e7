package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"syscall"

	"github.com/rewindstack/rewind/bpfunwind"
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
	u, err := session.LoadKernel(opt)
	if err == nil {
		return u, nil
	}
	if mode == "kernel" {
		return nil, fmt.Errorf("--unwind-in kernel: %s", err)
	}
	warn("unwinding in user space (--unwind-in auto): " + err.Error())
	return nil, nil
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

// recordKernel runs record with the in-kernel unwinder (the recording
// loop is session.Kernel's), or returns handled false when --unwind-in
// chose user space.
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
	k := &session.Kernel{Unwinder: u, Collector: col, OffCPU: rf.offCPU, Freq: rf.freq, PID: rf.pid, Argv: rf.cmdArgs,
		Duration: rf.dur, Warn: warn}
	if isTerminal(2) {
		k.Progress = os.Stderr
	}
	if *pf.out == "-" {
		k.CommandStdout = os.Stderr // standard output is the profile's
	}
	fmt.Fprintf(os.Stderr, "rewind: unwinding in the kernel (BPF), %s\n", kernelWhat(rf))
	tracefsStats(pf)
	if err := k.Start(); err != nil {
		return true, err
	}
	res := k.Run(ctx)
	if res.Exited && res.Count == 0 {
		fmt.Fprint(os.Stderr, k.ProgressEnd())
		kernelNotes(k)
		return true, noSamples(res.Elapsed, res.CommandErr)
	}
	fmt.Fprintf(os.Stderr, "%srewind: %s after %.1fs: %d samples, 0 lost (counted in the kernel)\n", k.ProgressEnd(), res.Why, res.Elapsed.Seconds(), res.Count)
	if d, n := u.ProgramTime(); n > 0 {
		fmt.Fprintf(os.Stderr, "rewind: the BPF unwinder ran %d times, %.1f ms of CPU in all (%.1f µs each)\n", n, float64(d)/1e6, float64(d)/1e3/float64(n))
	}
	kernelNotes(k)
	period := int64(1e9 / rf.freq)
	if err := finishProfile(build, col, pf, period, recordTitle(pf, rf.pid, rf.cmdArgs), nil); err != nil {
		return true, err
	}
	return true, commandStatus(res.CommandErr)
}

// kernelWhat says what a recording in the kernel records.
func kernelWhat(rf *recordFlags) string {
	if rf.offCPU {
		return "off-CPU time from sched_switch"
	}
	return fmt.Sprintf("on-CPU samples at %d Hz", rf.freq)
}

// kernelNotes prints what the kernel could not count or walk, one line
// each.
func kernelNotes(k *session.Kernel) {
	for _, n := range k.Notes() {
		warn(n)
	}
}
