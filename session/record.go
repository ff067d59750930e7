package session

import (
	"context"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/rewindstack/rewind/bpfunwind"
	"github.com/rewindstack/rewind/internal/tracefs"
	"github.com/rewindstack/rewind/perfevent"
	"github.com/rewindstack/rewind/profiles"
	"github.com/rewindstack/rewind/runtimes"
)

// Recording is what Record records, and how: rewind record's pipeline,
// from the events to the profile written.
type Recording struct {
	// PID is the running process recorded; when zero, Argv is the
	// command started and recorded from its exec, its standard output
	// going to CommandStdout when set (standard output holds the
	// profile).
	PID           int
	Argv          []string
	CommandStdout io.Writer
	// Freq is the sampling frequency per thread, in Hz; Duration, when
	// positive, ends the recording after that long.
	Freq     int
	Duration time.Duration
	// StackSize is the user stack copied per sample in user space;
	// GrowStack doubles it when a process's samples need more.
	StackSize int
	GrowStack bool
	// UserOnly leaves out kernel frames; OffCPU records where threads
	// block (sched_switch) instead of where they run.
	UserOnly, OffCPU bool
	// UnwindIn is where the stacks are walked: "kernel" (the BPF
	// unwinder, or an error), "user" (stack copies unwound afterwards)
	// or "auto" (kernel when the unwinder loads, else user, with a
	// warning).
	UnwindIn string
	// PendingLimit bounds the stack copies kept before they are unwound
	// while the recording goes on (see Session.PendingLimit).
	PendingLimit int
	// Progress, when set, receives a progress line: give it a terminal.
	Progress io.Writer
	// Profile says how the profile is made and written; its Log and Warn
	// also receive what the recording says.
	Profile ProfileOptions
}

// RecordResult is how Record went.
type RecordResult struct {
	// CommandErr is how the command Record started failed, when it
	// exited by itself (nil: it succeeded, or the recording ended it).
	CommandErr error
	// Written says a profile was written: a command that exited before
	// any sample gets none (Record says so to Log).
	Written bool
}

// bpfPrivilege is what the in-kernel walk needs and how to give it.
const bpfPrivilege = "it needs root, or CAP_BPF and CAP_PERFMON: run rewind as root or give it both (setcap cap_bpf,cap_perfmon=ep rewind)"

// MaxStackCopy is the most user stack the kernel copies per sample.
const MaxStackCopy = 65528

// CheckRecording checks what Record checks before it opens events: the
// process to attach to exists, the stack size is one the kernel takes
// (unused in the kernel, but the same recording must work in user space).
func CheckRecording(r *Recording) error {
	if r.StackSize < 8 || r.StackSize >= 64<<10 || r.StackSize%8 != 0 {
		return fmt.Errorf("stack size %d: want a multiple of 8 between 8 and 65528 bytes", r.StackSize)
	}
	if r.PID != 0 {
		if err := syscall.Kill(r.PID, 0); err == syscall.ESRCH {
			return fmt.Errorf("no such process: %d", r.PID)
		}
	}
	return nil
}

// Record records r until ctx is done, its duration is up or its command
// or process exits, and writes the profile: unwound in the kernel when
// r.UnwindIn allows it and the unwinder loads, else from stack copies.
// Call CheckRecording first.
func Record(ctx context.Context, r *Recording) (RecordResult, error) {
	methods, err := r.Profile.methods()
	if err != nil {
		return RecordResult{}, err
	}
	if res, handled, err := r.inKernel(ctx, methods); handled || err != nil {
		return res, err
	}
	return r.inUser(ctx, methods)
}

// inUser records stack copies, unwound in user space.
func (r *Recording) inUser(ctx context.Context, methods []profiles.Method) (RecordResult, error) {
	po := &r.Profile
	opt := perfevent.Options{Freq: r.Freq, StackSize: r.StackSize, UserOnly: r.UserOnly, Warn: po.Warn, OffCPU: r.OffCPU, Stdout: r.CommandStdout}
	col := profiles.NewCollector(perfevent.Arch())
	col.Warn = po.Warn
	var sampling *runtimes.Sampling
	if !r.OffCPU {
		// The interpreters' frames are read from the sampled processes
		// as each sample is read: woken at every sample, the reads
		// come a fraction of a millisecond after it.
		sampling = &runtimes.Sampling{Now: perfevent.Now, LateAfter: time.Second / time.Duration(max(r.Freq, 1)), Warn: po.Warn}
		defer sampling.Close()
		col.Interp, opt.Prompt = sampling, true
	}
	build := po.builder(col, methods, po.symbolizer())
	s := &Session{Collector: col, Builder: build, PendingLimit: r.PendingLimit, Warn: po.Warn, Log: po.Log,
		AdoptOrphans: true, Duration: r.Duration, GrowStack: r.GrowStack, GoStacks: true, Progress: r.Progress}
	if r.OffCPU {
		f, err := perfevent.ReadSwitchFormat()
		if err != nil {
			return RecordResult{}, err
		}
		s.OffCPU = profiles.NewOffCPU(col, f, nil)
	}
	if sampling != nil {
		// Woken at every sample only once a process runs a runtime
		// read at sample time.
		s.Idle = sampling.Idle
	}
	var err error
	if r.PID != 0 {
		err = s.Attach(r.PID, opt)
	} else {
		err = s.Start(r.Argv, opt)
	}
	if err != nil {
		return RecordResult{}, err
	}
	defer s.Close()
	r.tracefsStats()
	res := s.Run(ctx)
	if res.Exited && res.Samples == 0 {
		return r.noSamples(res.Elapsed, res.CommandErr), nil
	}
	log := po.log()
	fmt.Fprintf(log, "rewind: %s after %.1fs: %d samples, %d lost\n", res.Why, res.Elapsed.Seconds(), res.Samples, res.Lost)
	if po.Stats && res.GoAssist != "" {
		fmt.Fprintf(log, "rewind: Go assist: %s\n", res.GoAssist)
	}
	f := finish{periodNS: 1e9 / int64(r.Freq), offCPU: r.OffCPU, noInterpFrames: "record with --unwind-in kernel (" + bpfPrivilege + ")"}
	if sampling != nil {
		f.interpReads = sampling.Stats
	}
	switch size := res.StackSize; {
	case size >= MaxStackCopy && size > r.StackSize:
		f.copyEdgeHint = fmt.Sprintf("the copy grew to %d bytes, the kernel's most, while recording; earlier samples had less", size)
	case size >= MaxStackCopy:
		f.copyEdgeHint = fmt.Sprintf("%d bytes were copied, the kernel's most", size)
	}
	if err := po.finish(build, col, f); err != nil {
		return RecordResult{}, err
	}
	return RecordResult{CommandErr: res.CommandErr, Written: true}, nil
}

// inKernel records with the in-kernel unwinder (the recording loop is
// Kernel's), or returns handled false when UnwindIn chose user space.
func (r *Recording) inKernel(ctx context.Context, methods []profiles.Method) (RecordResult, bool, error) {
	po := &r.Profile
	col := profiles.NewCollector(perfevent.Arch())
	col.Warn = po.Warn
	build := po.builder(col, methods, po.symbolizer()) // (sets the tables' cache directory)
	opt := bpfunwind.Options{Objects: col.Objects, Warn: po.Warn, Filter: true, Sizes: bpfunwind.Process}
	if r.PID != 0 {
		opt.PIDs = []int{r.PID}
	}
	u, err := r.loadUnwinder(opt)
	if u == nil || err != nil {
		return RecordResult{}, false, err
	}
	defer u.Close()
	k := &Kernel{Unwinder: u, Collector: col, OffCPU: r.OffCPU, Freq: r.Freq, PID: r.PID, Argv: r.Argv,
		Duration: r.Duration, Warn: po.Warn, Progress: r.Progress, CommandStdout: r.CommandStdout}
	log := po.log()
	fmt.Fprintf(log, "rewind: unwinding in the kernel (BPF), %s\n", r.kernelWhat())
	r.tracefsStats()
	if err := k.Start(); err != nil {
		return RecordResult{}, true, err
	}
	res := k.Run(ctx)
	if res.Exited && res.Count == 0 {
		fmt.Fprint(log, k.ProgressEnd())
		r.kernelNotes(k)
		return r.noSamples(res.Elapsed, res.CommandErr), true, nil
	}
	fmt.Fprintf(log, "%srewind: %s after %.1fs: %d samples, 0 lost (counted in the kernel)\n", k.ProgressEnd(), res.Why, res.Elapsed.Seconds(), res.Count)
	if d, n := u.ProgramTime(); n > 0 {
		fmt.Fprintf(log, "rewind: the BPF unwinder ran %d times, %.1f ms of CPU in all (%.1f µs each)\n", n, float64(d)/1e6, float64(d)/1e3/float64(n))
	}
	r.kernelNotes(k)
	if err := po.finish(build, col, finish{periodNS: int64(1e9 / r.Freq), offCPU: r.OffCPU}); err != nil {
		return RecordResult{}, true, err
	}
	return RecordResult{CommandErr: res.CommandErr, Written: true}, true, nil
}

// loadUnwinder loads the in-kernel unwinder for UnwindIn kernel or auto;
// for auto, a failure is one warning and nil (unwind in user space), for
// kernel it is the error.
func (r *Recording) loadUnwinder(opt bpfunwind.Options) (*bpfunwind.Unwinder, error) {
	if r.UnwindIn == "user" {
		return nil, nil
	}
	u, err := LoadKernel(opt)
	if err == nil {
		return u, nil
	}
	if r.UnwindIn == "kernel" {
		return nil, fmt.Errorf("--unwind-in kernel: %s", err)
	}
	r.Profile.warn("unwinding in user space (--unwind-in auto): " + err.Error())
	return nil, nil
}

// kernelWhat says what a recording in the kernel records.
func (r *Recording) kernelWhat() string {
	if r.OffCPU {
		return "off-CPU time from sched_switch"
	}
	return fmt.Sprintf("on-CPU samples at %d Hz", r.Freq)
}

// kernelNotes warns of what the kernel could not count or walk, one line
// each.
func (r *Recording) kernelNotes(k *Kernel) {
	for _, n := range k.Notes() {
		r.Profile.warn(n)
	}
}

// tracefsStats says, with Stats, that rewind mounted tracefs (as perf
// does, and leaves it mounted).
func (r *Recording) tracefsStats() {
	if dir := tracefs.Mounted(); dir != "" && r.Profile.Stats {
		fmt.Fprintf(r.Profile.log(), "rewind: tracefs was not mounted: mounted it on %s\n", dir)
	}
}

// noSamples is a recording's end when the command it started exited
// before any sample (false, true, a program that fails at once): one
// line, as perf's, and no profile.
func (r *Recording) noSamples(elapsed time.Duration, cmdErr error) RecordResult {
	how := ""
	if cmdErr != nil {
		how = " (" + cmdErr.Error() + ")"
	}
	fmt.Fprintf(r.Profile.log(), "rewind: no samples: the command exited after %s%s; no profile written\n", shortDuration(elapsed), how)
	return RecordResult{CommandErr: cmdErr}
}

// shortDuration prints a command's run time: milliseconds under a
// second, else seconds.
func shortDuration(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%d ms", d.Milliseconds())
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}
