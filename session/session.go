// Package session runs one live recording from start to end: the loops
// that rewind record, rewind agent and the tests share. A Session reads a
// perfevent recorder through a Pump (the read loop, which the agent also
// uses alone) and decides when the recording ends (its context is done, a
// duration is up, the command it started or the process it attached to
// exits, or its Tick says so); it grows the stack copy when samples need
// more, reaps the orphans the command leaves behind, shows progress,
// flushes an off-CPU recording's last samples, and ends the command it
// started (SIGTERM, then SIGKILL) with what that command left running.
// Kernel does the same for a recording unwound in the kernel (bpfunwind),
// reading its counts.
//
// Session and Kernel build nothing themselves: the collector, builder and
// off-CPU accumulator they feed are the caller's, who writes the profile
// after Run (WriteProfile writes it without losing it to an output
// problem). Record and Report are whole pipelines, rewind record's and
// rewind report's: from the events, or a perf.data file, to the profile
// written, as ProfileOptions say.
package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rewindstack/rewind/internal/goassist"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/perfdata"
	"github.com/rewindstack/rewind/perfevent"
	"github.com/rewindstack/rewind/profiles"
)

// DefaultKillGrace is the default Session.KillGrace.
const DefaultKillGrace = 2 * time.Second

// Session is one recording. Set its fields, then Start a command or
// Attach to a process (or set Recorder to a recorder of your own), Run it,
// and Close it.
type Session struct {
	// Recorder is the recording read; Start and Attach set it.
	Recorder *perfevent.Recorder
	// Collector receives every record unless Add or OffCPU is set. Attach
	// seeds it with the process's mappings and thread names.
	Collector *profiles.Collector
	// Builder, with Collector, unwinds the samples as the recording goes
	// whenever the pending stack copies exceed PendingLimit bytes (see
	// Pump); with OffCPU it receives the off-CPU samples still
	// waiting for their thread's switch-in when the recording ends.
	Builder      *profiles.Builder
	PendingLimit int
	// Add, when set, receives every record instead of Collector.
	Add func(*perfdata.Record)
	// OffCPU, when set, receives every record (a sched_switch recording):
	// its samples learn their value when their thread runs again, so they
	// are unwound after Run, not as they come.
	OffCPU *profiles.OffCPU
	// AdoptOrphans, for Start: the processes the command leaves behind
	// when their parent dies (a script's background jobs) become this
	// process's children (PR_SET_CHILD_SUBREAPER), so that they are
	// reaped as they exit during the recording and ended with the
	// command at its end.
	AdoptOrphans bool
	// Duration, when positive, ends the recording after that long.
	Duration time.Duration
	// GrowStack doubles the stack copy, at most once a second, when a
	// process's samples show deeper stacks than it holds (see
	// perfevent.Recorder.GrowStack), saying so to Log.
	GrowStack bool
	// Progress, when not nil, receives a progress line (samples, lost,
	// seconds) every 250 ms, rewritten in place with \r and erased at
	// the end: give it a terminal.
	Progress io.Writer
	// Log receives what the session has to say while it records (the
	// stack copy growing); nil: nothing is said.
	Log io.Writer
	// Warn receives problems that do not end the recording (nil: none).
	Warn func(string)
	// Tick, when set, is called after every read of the recording, when
	// nothing else ended it; a non-empty result ends it with that reason.
	Tick func() string
	// Interval is the longest wait between two reads (default 100 ms).
	Interval time.Duration
	// Idle is the read loop's Pump.Idle.
	Idle func() bool
	// KillGrace is how long the command Start started gets between
	// SIGTERM and SIGKILL at the end (default DefaultKillGrace).
	KillGrace time.Duration
	// GoStacks, for a cpu-clock recording into Collector, attaches the Go
	// assist (internal/goassist) to the sampling events: a sample on a Go
	// thread's system stack (runtime.newstack under runtime.morestack, a
	// function runtime.systemstack runs) then also copies the goroutine's
	// g and stack, so that its walk crosses to the goroutine's frames as
	// Go's own profiler and the walk in the kernel do. It needs BPF (root,
	// or CAP_BPF and CAP_PERFMON); without, the recording goes on without
	// it and Result.GoAssist says why.
	GoStacks bool

	assist    *goassist.Assist
	assistErr error
	cmd       *perfevent.Command
	argv      []string
	pid       int
	exited    chan error
}

// Result is how a recording went.
type Result struct {
	// Why says what ended the recording: "interrupted" (Run's context
	// was done), "duration reached", "command exited", "command exited
	// (exit status 1)", "process 1234 exited", or what Tick returned.
	Why string
	// Interrupted says that Run's context ended the recording.
	Interrupted bool
	// Elapsed is the recording's length, up to its end (not counting
	// the command's ending).
	Elapsed time.Duration
	// Samples and Lost count the recorder's samples and lost records.
	Samples, Lost uint64
	// Exited says that the command Start started exited by itself
	// during the recording (it ended the recording), and CommandErr how
	// when it failed (nil: it succeeded, or the session ended it).
	Exited     bool
	CommandErr error
	// StackSize is the stack copy's size at the end, in bytes.
	StackSize int
	// ReadErr is the error that stopped reading the recording, if any:
	// the collector holds what was read before it.
	ReadErr error
	// GoAssist says, with GoStacks, what the Go assist did, or why it
	// was not used.
	GoAssist string
}

// ErrNoProcess is wrapped by Attach's error when the process does not
// exist.
var ErrNoProcess = errors.New("no such process")

// Start starts argv under recording with opt (see
// perfevent.StartCommand) and lets it run: the recording covers it from
// its exec. Its exit ends Run, and Run's end ends it. A program that
// cannot be run is a *perfevent.NotRunnableError.
func (s *Session) Start(argv []string, opt perfevent.Options) error {
	if s.AdoptOrphans {
		unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	}
	s.loadAssist(&opt)
	rec, cmd, err := perfevent.StartCommand(argv, opt)
	if err != nil && opt.Assist != 0 && errors.Is(err, perfevent.ErrAssist) {
		s.dropAssist(err, &opt)
		rec, cmd, err = perfevent.StartCommand(argv, opt)
	}
	if err != nil {
		s.closeAssist()
		return err
	}
	s.Recorder, s.cmd, s.argv = rec, cmd, argv
	if s.assist != nil {
		// Before the exec: the path the command will run.
		if exe, err := exec.LookPath(argv[0]); err == nil {
			s.assist.Register(cmd.Process.Pid, exe)
		}
	}
	if err := cmd.Release(); err != nil && s.Warn != nil {
		s.Warn(fmt.Sprintf("starting %s: %v", argv[0], err))
	}
	s.exited = make(chan error, 1)
	go func() { s.exited <- cmd.Wait() }()
	return nil
}

// Attach records the running process pid with opt (see
// perfevent.AttachPID), seeding Collector, when set, with the process's
// mappings and thread names. Its exit ends Run; Run's end leaves it alone.
func (s *Session) Attach(pid int, opt perfevent.Options) error {
	if pid <= 0 {
		return fmt.Errorf("bad process ID %d", pid)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %d", ErrNoProcess, pid)
	}
	if s.Collector != nil {
		if err := s.Collector.AddProcess(pid); err != nil {
			if live.Exited(pid) {
				return fmt.Errorf("%w: %d", ErrNoProcess, pid)
			}
			return fmt.Errorf("process %d: %w", pid, err)
		}
	}
	s.loadAssist(&opt)
	if s.assist != nil {
		s.assist.Register(pid, "")
	}
	rec, err := perfevent.AttachPID(pid, opt)
	if err != nil && opt.Assist != 0 && errors.Is(err, perfevent.ErrAssist) {
		s.dropAssist(err, &opt)
		rec, err = perfevent.AttachPID(pid, opt)
	}
	if err != nil {
		s.closeAssist()
		return err
	}
	s.Recorder, s.pid = rec, pid
	return nil
}

// Command returns the command Start started, nil after Attach.
func (s *Session) Command() *perfevent.Command { return s.cmd }

// Close closes the recorder.
func (s *Session) Close() error {
	var err error
	if s.Recorder != nil {
		err = s.Recorder.Close()
	}
	s.closeAssist()
	return err
}

func (s *Session) closeAssist() {
	if s.assist != nil {
		s.assist.Close()
		s.assist = nil
		s.Collector.Memory = nil
	}
}

// loadAssist loads the Go assist for GoStacks and sets it in opt.
func (s *Session) loadAssist(opt *perfevent.Options) {
	if !s.GoStacks || opt.OffCPU || s.Collector == nil || s.Add != nil || s.assist != nil {
		return
	}
	a, err := goassist.Load()
	if err != nil {
		s.assistErr = err
		return
	}
	s.assist, opt.Assist, s.Collector.Memory = a, a.Program(), a
}

// dropAssist unloads the Go assist the events refused.
func (s *Session) dropAssist(err error, opt *perfevent.Options) {
	s.closeAssist()
	opt.Assist, s.assistErr = 0, err
}

// assistSummary is Result.GoAssist.
func (s *Session) assistSummary() string {
	switch {
	case !s.GoStacks:
		return ""
	case s.assist == nil && s.assistErr != nil:
		return "not used: " + s.assistErr.Error()
	case s.assist == nil:
		return ""
	}
	st := s.assist.Stats()
	return fmt.Sprintf("%d Go processes; %d samples on a system stack copied their goroutine, %d of them paired with their sample, %d not (lost or late); %d had no room in the ring, %d no readable g; %d samples on a goroutine's stack, %d with no g",
		st.Processes, st.Sent, st.Paired, st.Dropped, st.Full, st.Unreadable, st.OnG, st.NotG)
}

// Run records until ctx is done, Duration is up, the command or process
// exits, or Tick returns a reason; then it reads what is left, flushes
// OffCPU into Builder, and ends the command Start started (unless it
// exited: SIGTERM, unless ctx ended the recording, since an interrupt
// from the terminal reached the command too; SIGKILL after KillGrace; and
// with AdoptOrphans, what it left running).
func (s *Session) Run(ctx context.Context) Result {
	var res Result
	l := &loop{s: s, ctx: ctx, res: &res, start: time.Now()}
	l.lastGrow, l.lastReap = l.start, l.start
	if s.Duration > 0 {
		t := time.NewTimer(s.Duration)
		defer t.Stop()
		l.deadline = t.C
	}
	pump := &Pump{Source: s.Recorder, Collector: s.Collector, Builder: s.Builder, PendingLimit: s.PendingLimit,
		Add: s.Add, Warn: s.Warn, Interval: s.Interval, Check: l.check, Idle: s.Idle}
	if s.OffCPU != nil {
		pump.Add, pump.Builder = s.OffCPU.Add, nil
	}
	res.Why = pump.Run()
	res.ReadErr = pump.Err()
	if s.OffCPU != nil && s.Builder != nil {
		s.Builder.Add(s.OffCPU.Flush(perfevent.Now()))
	}
	if s.Progress != nil {
		fmt.Fprint(s.Progress, "\r\033[K")
	}
	res.Elapsed = time.Since(l.start)
	if s.cmd != nil && !l.reaped {
		s.endCommand(res.Interrupted)
	}
	res.Samples, res.Lost, res.StackSize = s.Recorder.Samples(), s.Recorder.Lost(), s.Recorder.StackSize()
	res.GoAssist = s.assistSummary()
	return res
}

// loop is one Run's state between reads.
type loop struct {
	s                                *Session
	ctx                              context.Context
	res                              *Result
	deadline                         <-chan time.Time
	start, lastGrow, lastReap, lastP time.Time
	reaped                           bool
}

// check is the pump's Check: the chores of a read, then whether to stop.
func (l *loop) check(bool) string {
	s := l.s
	if s.GrowStack && time.Since(l.lastGrow) > time.Second {
		l.lastGrow = time.Now()
		l.grow()
	}
	if s.cmd != nil && s.AdoptOrphans && time.Since(l.lastReap) > 200*time.Millisecond {
		l.lastReap = time.Now()
		reapOrphans(s.cmd.Process.Pid)
	}
	if s.Progress != nil && time.Since(l.lastP) > 250*time.Millisecond {
		l.lastP = time.Now()
		fmt.Fprintf(s.Progress, "\rrewind: %d samples, %d lost, %.1fs ", s.Recorder.Samples(), s.Recorder.Lost(), time.Since(l.start).Seconds())
	}
	select {
	case <-l.ctx.Done():
		l.res.Interrupted = true
		return "interrupted"
	case <-l.deadline:
		return "duration reached"
	case err := <-s.exited:
		l.res.Exited, l.res.CommandErr, l.reaped = true, err, true
		if err != nil {
			return fmt.Sprintf("command exited (%v)", err)
		}
		return "command exited"
	default:
	}
	if s.pid != 0 && live.Exited(s.pid) {
		return fmt.Sprintf("process %d exited", s.pid)
	}
	if s.Tick != nil {
		return s.Tick()
	}
	return ""
}

// grow doubles the stack copy when a process needs more.
func (l *loop) grow() {
	s := l.s
	size, p, err := s.Recorder.GrowStack()
	switch {
	case err != nil:
		if s.Warn != nil {
			s.Warn(fmt.Sprintf("copying more stack per sample: %v", err))
		}
		s.GrowStack = false
	case size > 0 && s.Log != nil:
		fmt.Fprintf(s.Log, "\rrewind: process %d has stacks deeper than the copy: copying %d bytes per sample from now on\n", p, size)
	}
}

// endCommand ends the command Start started, which has not exited.
func (s *Session) endCommand(interrupted bool) {
	grace := s.KillGrace
	if grace <= 0 {
		grace = DefaultKillGrace
	}
	if !interrupted {
		s.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-s.exited:
	case <-time.After(grace):
		s.cmd.Process.Kill()
		<-s.exited
	}
	if !interrupted && s.AdoptOrphans {
		endOrphans(grace, s.Warn)
	}
}
