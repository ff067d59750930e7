package session

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	_ "github.com/rewindstack/rewind/runtimes/builtin" // the kernel walk's runtimes (CPython, LuaJIT, Ruby), found in the registry
)

// Kernel is one recording unwound in the kernel: a bpfunwind program
// walks the stacks at sample time and counts them there, and Run reads
// the counts every second into a collector. Set its fields, Start it, Run
// it; the caller loaded the unwinder and writes the profile after Run.
type Kernel struct {
	// Unwinder is the loaded in-kernel unwinder, and Collector the
	// collector its counts are fed to (bpfunwind.Unwinder.Feed).
	Unwinder  *bpfunwind.Unwinder
	Collector *profiles.Collector
	// OffCPU records off-CPU time from sched_switch; otherwise on-CPU
	// samples at Freq Hz. Freq also gives each count its period.
	OffCPU bool
	Freq   int
	// PID is the process recorded (its exit ends Run); when zero, Argv
	// is the command Start starts and records from its exec. Its standard
	// streams are this process's, its output going to CommandStdout
	// when set.
	PID           int
	Argv          []string
	CommandStdout io.Writer
	// Duration, when positive, ends the recording after that long.
	Duration time.Duration
	// Progress, when not nil, receives a progress line (samples,
	// seconds) every second, rewritten in place with \r: give it a
	// terminal (see ProgressEnd).
	Progress io.Writer
	// Warn receives problems that do not end the recording (nil: none).
	Warn func(string)

	cmd     *exec.Cmd
	exit    chan error
	reads   int
	count   uint64
	started time.Time
}

// KernelResult is how a recording in the kernel went.
type KernelResult struct {
	// Why says what ended the recording: "interrupted", "duration
	// reached", "command exited", "command exited (exit status 1)",
	// "process exited".
	Why string
	// Elapsed is the recording's length, up to its end.
	Elapsed time.Duration
	// Count is the samples (on-CPU) or blocked intervals (off-CPU)
	// counted.
	Count uint64
	// Exited says that the command Start started exited by itself,
	// ending the recording, and CommandErr how when it failed.
	Exited     bool
	CommandErr error
}

// Start attaches the program and, without PID, starts the command.
func (k *Kernel) Start() error {
	var err error
	if k.OffCPU {
		err = k.Unwinder.OffCPU(0)
	} else {
		err = k.Unwinder.OnCPU(k.Freq)
	}
	if err != nil {
		return err
	}
	if k.PID != 0 {
		k.started = time.Now()
		return nil
	}
	k.Unwinder.Prewarm(k.Argv[0])
	// What the command leaves behind is this process's to end.
	unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	// Start returns once the program is exec'd: traced then, its
	// mappings are the program's (a shell held before the exec would be
	// described, and its mappings named in the profile). The process is
	// reaped only after it is traced; one that exited at once (false)
	// has nothing to describe, which is no error.
	k.cmd = exec.Command(k.Argv[0], k.Argv[1:]...)
	k.cmd.Stdin, k.cmd.Stdout, k.cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if k.CommandStdout != nil {
		k.cmd.Stdout = k.CommandStdout
	}
	// Tied to this process: the command dies with it, even under kill -9.
	if err := perfevent.StartTied(k.cmd); err != nil {
		return err
	}
	k.started = time.Now()
	err = k.Unwinder.Trace(k.cmd.Process.Pid)
	k.exit = make(chan error, 1)
	go func() { k.exit <- k.cmd.Wait() }()
	if err != nil && !exitedAlready(k.cmd.Process.Pid) {
		k.cmd.Process.Kill()
		<-k.exit
		k.exit = nil
		return fmt.Errorf("tracing %s: %w", k.Argv[0], err)
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

// Run reads the counts every second until ctx is done, Duration is up, or
// the command or process exits; then it ends the command Start started
// (SIGTERM unless ctx ended the recording, SIGKILL after
// DefaultKillGrace, and what it left running) and reads what is left.
func (k *Kernel) Run(ctx context.Context) KernelResult {
	var res KernelResult
	var timeout <-chan time.Time
	if k.Duration > 0 {
		timeout = time.After(k.Duration - time.Since(k.started))
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var ended time.Time // when Why was found: the recording's end
	for res.Why == "" {
		select {
		case <-ctx.Done():
			res.Why = "interrupted"
		case <-timeout:
			res.Why = "duration reached"
		case err := <-k.exit:
			res.Why, res.Exited = "command exited", true
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				res.Why = fmt.Sprintf("command exited (%v)", ee)
				res.CommandErr = err
			}
			k.exit = nil
		case <-tick.C:
			if k.PID != 0 && syscall.Kill(k.PID, 0) == syscall.ESRCH {
				res.Why = "process exited"
			}
		}
		if res.Why != "" {
			ended = time.Now()
		}
		k.read()
		if k.exit != nil {
			reapOrphans(k.cmd.Process.Pid)
		}
		if k.Progress != nil {
			fmt.Fprintf(k.Progress, "\rrewind: %d samples, 0 lost, %.1fs", k.count, time.Since(k.started).Seconds())
		}
	}
	k.endCommand(res.Why == "interrupted")
	k.read()
	res.Elapsed, res.Count = ended.Sub(k.started), k.count
	return res
}

// ProgressEnd returns what ends the progress line, if one was shown.
func (k *Kernel) ProgressEnd() string {
	if k.Progress != nil && k.reads > 0 {
		return "\r\x1b[K"
	}
	return ""
}

// read hands the counts of the period to the collector.
func (k *Kernel) read() {
	stacks, err := k.Unwinder.Read()
	if err != nil {
		k.warn(fmt.Sprintf("reading the kernel's counts: %v", err))
		return
	}
	periodNS := uint64(1e9 / k.Freq)
	for _, s := range stacks {
		k.count += s.Events
	}
	k.Unwinder.Feed(k.Collector, stacks, perfevent.Now(), periodNS)
	k.reads++
}

func (k *Kernel) warn(msg string) {
	if k.Warn != nil {
		k.Warn(msg)
	}
}

// endCommand ends a command still running when the recording stops: the
// command gets SIGTERM, then SIGKILL after DefaultKillGrace.
func (k *Kernel) endCommand(interrupted bool) {
	if k.cmd == nil {
		return
	}
	if k.exit != nil {
		if !interrupted {
			k.cmd.Process.Signal(syscall.SIGTERM)
		}
		select {
		case <-k.exit:
		case <-time.After(DefaultKillGrace):
			k.cmd.Process.Kill()
			<-k.exit
		}
	}
	if !interrupted {
		endOrphans(DefaultKillGrace, k.Warn)
	}
}

// Notes returns what the kernel could not count or walk, one line each.
func (k *Kernel) Notes() []string {
	var out []string
	for s, n := range tracefs.FoldNotes(k.Unwinder.Notes()) {
		if n > 1 {
			s = fmt.Sprintf("%s (%d times)", s, n)
		}
		out = append(out, s)
	}
	e := k.Unwinder.Errors()
	if e.CountsFull+e.StacksFull+e.OffCPUFull+e.NoticesLost+e.KStacksFull > 0 {
		out = append(out, fmt.Sprintf("the kernel's maps were full: %d counts, %d stacks, %d off-CPU starts, %d notices, %d kernel stacks not kept",
			e.CountsFull, e.StacksFull, e.OffCPUFull, e.NoticesLost, e.KStacksFull))
	}
	return out
}

// LoadKernel loads the in-kernel unwinder with opt (bpfunwind.Load). A
// refusal for want of privilege says how to give it.
func LoadKernel(opt bpfunwind.Options) (*bpfunwind.Unwinder, error) {
	u, err := bpfunwind.Load(opt)
	if err != nil {
		return nil, &loadError{err}
	}
	return u, nil
}

// loadError is why the in-kernel unwinder did not load.
type loadError struct{ err error }

// Error is the load's error, with how to give rewind the privilege when
// that is why.
func (e *loadError) Error() string {
	msg := e.err.Error()
	if strings.Contains(msg, "not permitted") && !strings.Contains(msg, "setcap") {
		msg = strings.TrimSuffix(msg, " (needs root, or CAP_BPF and CAP_PERFMON)") +
			": run rewind as root or give it CAP_BPF and CAP_PERFMON (setcap cap_bpf,cap_perfmon=ep rewind)"
	}
	return msg
}

func (e *loadError) Unwrap() error { return e.err }
