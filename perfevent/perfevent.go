// Package perfevent samples running processes with perf_event_open: a
// cpu-clock event per thread and CPU that records the instruction pointer,
// thread, time, the kernel's callchain, the user registers and a copy of the
// user stack, inherited by threads and processes created later. Records are
// read from mmap'ed ring buffers and handed out decoded by package perfdata,
// the same decoder that reads perf.data files.
package perfevent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rewindstack/rewind/perfdata"
	"github.com/rewindstack/rewind/regs"
)

// Options configure a recording.
type Options struct {
	// Freq is the sampling frequency in Hz per thread (default 99).
	Freq int
	// StackSize is the number of bytes of user stack copied per sample
	// (default 16 KiB; a multiple of 8 below 64 KiB).
	StackSize int
	// BufferPages is the data size of each CPU's ring buffer in pages,
	// a power of two (default 1024: 4 MiB with 4 KiB pages). Smaller
	// sizes are tried when the locked-memory limit refuses it.
	BufferPages int
	// UserOnly excludes kernel samples and callchains. Without it the
	// kernel part is recorded when perf_event_paranoid allows, and
	// dropped with a warning otherwise.
	UserOnly bool
	// OffCPU records the sched_switch tracepoint (SwitchAttr) instead of
	// the cpu-clock event: every context switch of the recorded threads
	// that blocks them (see blockingOnly), with the switched-out thread's
	// registers and stack, stamped with ClockID (see profiles.OffCPU).
	OffCPU bool
	// Assist, when not 0, is the file descriptor of a BPF program of type
	// perf_event to attach to every sampling event (internal/goassist):
	// it runs on each sample before the kernel writes it, and the
	// records are then stamped with ClockID, the clock BPF programs read.
	Assist int
	// Prompt wakes the reader at every sample instead of when a buffer
	// is half full, and stamps the records with ClockID: a reader of the
	// sampled process's memory at the wake-up (runtimes.Sampler) reads it
	// as soon after the sample as it can, and knows how soon.
	Prompt bool
	// Warn receives warnings (may be nil).
	Warn func(string)
	// Stdout and Stderr receive a StartCommand program's output (default:
	// rewind's own).
	Stdout, Stderr io.Writer
}

func (o *Options) fill() error {
	if o.Freq == 0 {
		o.Freq = 99
	}
	if o.StackSize == 0 {
		o.StackSize = 16 << 10
	}
	if o.BufferPages == 0 {
		o.BufferPages = 1024
	}
	switch {
	case o.Freq < 1 || o.Freq > 100000:
		return fmt.Errorf("frequency %d Hz out of range (1..100000)", o.Freq)
	case o.StackSize < 8 || o.StackSize >= 64<<10 || o.StackSize%8 != 0:
		return fmt.Errorf("stack size %d: want a multiple of 8 between 8 and 65528 bytes", o.StackSize)
	case o.BufferPages < 1 || o.BufferPages&(o.BufferPages-1) != 0:
		return fmt.Errorf("buffer of %d pages: want a power of two", o.BufferPages)
	}
	return nil
}

// ErrAssist is wrapped by the error of a recording whose events refused
// Options.Assist.
var ErrAssist = errors.New("attaching the BPF assist to the sampling events")

// Arch is the architecture of this process, which is the one rewind records.
func Arch() regs.Arch {
	switch runtime.GOARCH {
	case "amd64":
		return regs.AMD64
	case "arm64":
		return regs.ARM64
	}
	return regs.Unknown
}

// Attr returns the event attribute rewind records with.
func Attr(o Options) *perfdata.Attr {
	a := &perfdata.Attr{
		Type:         perfdata.TypeSoftware,
		Config:       perfdata.ConfigCPUClock,
		SamplePeriod: uint64(o.Freq),
		SampleType: perfdata.SampleIP | perfdata.SampleTID | perfdata.SampleTime | perfdata.SampleCallchain |
			perfdata.SampleCPU | perfdata.SamplePeriod | perfdata.SampleRegsUser | perfdata.SampleStackUser,
		Flags: perfdata.FlagDisabled | perfdata.FlagInherit | perfdata.FlagFreq | perfdata.FlagMmap |
			perfdata.FlagComm | perfdata.FlagTask | perfdata.FlagMmap2 | perfdata.FlagCommExec |
			perfdata.FlagSampleIDAll | perfdata.FlagExcludeHV | perfdata.FlagWatermark,
		SampleRegsUser:  regs.PerfUserMask(Arch()),
		SampleStackUser: uint32(o.StackSize),
	}
	if o.UserOnly {
		a.Flags |= perfdata.FlagExcludeKernel
	}
	if o.Assist != 0 || o.Prompt {
		a.Flags |= perfdata.FlagUseClockID
		a.ClockID = ClockID
	}
	if o.Prompt {
		a.Flags &^= perfdata.FlagWatermark
		a.WakeupEvents = 1
	}
	return a
}

// paranoidPath is kernel.perf_event_paranoid; a variable for tests.
var paranoidPath = "/proc/sys/kernel/perf_event_paranoid"

// paranoid returns kernel.perf_event_paranoid, ok false when it cannot
// be read.
func paranoid() (int, bool) {
	b, err := os.ReadFile(paranoidPath)
	if err != nil {
		return 0, false
	}
	p, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return p, err == nil
}

// capFix is how to give rewind the privilege perf events need.
const capFix = "run rewind as root or give it CAP_PERFMON (setcap cap_perfmon=ep rewind)"

// needs says what perf_event_open needs for an event of what (the kernel's
// checks: kernel/events/core.c) when kernel.perf_event_paranoid must be at
// most max: root or CAP_PERFMON, or the sysctl lowered, stating its value.
func needs(what string, max int) string {
	p, ok := paranoid()
	if !ok {
		return fmt.Sprintf("%s needs root or CAP_PERFMON, or kernel.perf_event_paranoid <= %d: %s", what, max, capFix)
	}
	return fmt.Sprintf("%s needs root or CAP_PERFMON, or kernel.perf_event_paranoid <= %d (it is %d): %s, or lower it as root: sysctl kernel.perf_event_paranoid=%d",
		what, max, p, capFix, max)
}

// PermissionHint says what recording kernel frames needs, for the warning
// that they are not recorded.
func PermissionHint() string {
	return needs("recording kernel frames", 1) + " (--user-only leaves them out without this line)"
}

// permissionError says why perf_event_open refused attr on et and what
// would allow it: the privilege, or the sysctl's value needed beside its
// value now; when the sysctl already allows it for one's own processes,
// that the process is another user's.
func permissionError(err error, attr *perfdata.Attr, et eventTarget) error {
	target, what, max := targetName(et), "", 2
	switch {
	case et.cgroup:
		what, max = "profiling a cgroup (on every CPU)", 0
	case et.pid < 0:
		what, max = "profiling every process", 0
	default:
		what = "profiling " + target
	}
	if attr.Type == perfdata.TypeTracepoint && attr.SampleType&perfdata.SampleRaw != 0 {
		// The sched_switch records of off-CPU profiles.
		what, max = "recording sched_switch (off-CPU profiles)", -1
	}
	if p, ok := paranoid(); ok && p <= max {
		if et.cgroup || et.pid < 0 {
			return fmt.Errorf("perf_event_open on %s: %w: refused although kernel.perf_event_paranoid is %d, which allows it (a security module?): %s",
				target, err, p, capFix)
		}
		// The sysctl allows it: the process is another user's (or not
		// dumpable), which only the privilege gets past.
		return fmt.Errorf("perf_event_open on %s: %w: it is not yours to profile (kernel.perf_event_paranoid is %d, which allows only your own processes): %s",
			target, err, p, capFix)
	}
	return fmt.Errorf("perf_event_open on %s: %w: %s", target, err, needs(what, max))
}

// processOf returns the process a thread belongs to (tid itself when it
// cannot be read).
func processOf(tid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", tid))
	if err != nil {
		return tid
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Tgid:"); ok {
			if pid, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && pid > 0 {
				return pid
			}
		}
	}
	return tid
}

// Recorder owns the events and ring buffers of one recording.
type Recorder struct {
	attr    *perfdata.Attr
	dec     *perfdata.Decoder
	fds     []int
	bufs    []*ring
	pfds    []unix.PollFd
	lost    atomic.Uint64
	records atomic.Uint64
	samples atomic.Uint64
	closed  bool
	rec     perfdata.Record
	scratch []byte
	// opt are the options the events were opened with, stackSize the
	// stack copy of the newest ones (see GrowStack).
	opt       Options
	stackSize int
	copies    map[int]*copyStats
}

// Attr returns the attribute the recorder's events were opened with.
func (r *Recorder) Attr() *perfdata.Attr { return r.attr }

// Lost returns the number of records the kernel reported lost so far.
func (r *Recorder) Lost() uint64 { return r.lost.Load() }

// Samples returns the number of samples read so far.
func (r *Recorder) Samples() uint64 { return r.samples.Load() }

// onlineCPUs parses /sys/devices/system/cpu/online ("0-3,5").
func onlineCPUs() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, err
	}
	var cpus []int
	for _, part := range strings.Split(strings.TrimSpace(string(b)), ",") {
		lo, hi, found := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		c := a
		var err2 error
		if found {
			c, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || c < a {
			return nil, fmt.Errorf("cannot parse online CPUs %q", b)
		}
		for i := a; i <= c; i++ {
			cpus = append(cpus, i)
		}
	}
	return cpus, nil
}

func perfEventOpenFlags(attr []byte, pid, cpu, groupFD int, flags uintptr) (int, error) {
	fd, _, errno := unix.Syscall6(unix.SYS_PERF_EVENT_OPEN, uintptr(unsafe.Pointer(&attr[0])),
		uintptr(pid), uintptr(cpu), uintptr(groupFD), flags, 0)
	runtime.KeepAlive(attr)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

// open opens the events for tids on every online CPU: the first event of a
// CPU owns its ring buffer, later ones redirect their output into it.
func open(tids []int, opt Options, enableOnExec bool) (*Recorder, error) {
	if err := opt.fill(); err != nil {
		return nil, err
	}
	attr := Attr(opt)
	if opt.OffCPU {
		id, err := TracepointID("sched", "sched_switch")
		if err != nil {
			return nil, err
		}
		attr = SwitchAttr(opt, id)
		attr.Flags |= perfdata.FlagUseClockID
		attr.ClockID = ClockID
	}
	if enableOnExec {
		attr.Flags |= perfdata.FlagEnableOnExec
	}
	var evs []eventTarget
	for _, tid := range tids {
		evs = append(evs, eventTarget{pid: tid, cpu: -1})
	}
	r, err := openEvents(attr, evs, opt)
	if err == nil && opt.OffCPU {
		r.blockingOnly()
	}
	return r, err
}

// eventTarget is one perf_event_open call: a thread (pid, cpu -1 for
// every CPU), or a CPU (pid -1, or a cgroup directory's descriptor with
// cgroup set).
type eventTarget struct {
	pid, cpu int
	cgroup   bool
}

// openEvents opens attr for every target, on every online CPU for targets
// with cpu -1: the first event of a CPU owns its ring buffer, later ones
// redirect their output into it.
func openEvents(attr *perfdata.Attr, evs []eventTarget, opt Options) (*Recorder, error) {
	if Arch() == regs.Unknown {
		return nil, fmt.Errorf("recording is not supported on %s", runtime.GOARCH)
	}
	cpus, err := onlineCPUs()
	if err != nil {
		return nil, err
	}
	r := &Recorder{attr: attr, opt: opt, stackSize: opt.StackSize}
	ok := false
	defer func() {
		if !ok {
			r.Close()
		}
	}()
	first := make(map[int]int) // cpu -> fd owning the buffer
	for _, ev := range evs {
		evCPUs := cpus
		if ev.cpu >= 0 {
			evCPUs = []int{ev.cpu}
		}
		flags := uintptr(unix.PERF_FLAG_FD_CLOEXEC)
		if ev.cgroup {
			flags |= unix.PERF_FLAG_PID_CGROUP
		}
		for _, cpu := range evCPUs {
			fd, err := perfEventOpenFlags(attr.Marshal(), ev.pid, cpu, -1, flags)
			if (err == unix.EACCES || err == unix.EPERM) && attr.Flags&perfdata.FlagExcludeKernel == 0 && len(r.fds) == 0 && attr.Type != perfdata.TypeTracepoint {
				// Kernel sampling is not allowed: fall back to user only.
				attr.Flags |= perfdata.FlagExcludeKernel
				fd, err = perfEventOpenFlags(attr.Marshal(), ev.pid, cpu, -1, flags)
				if err == nil && opt.Warn != nil {
					opt.Warn("kernel frames are not recorded: " + PermissionHint())
				}
			}
			if err == unix.ESRCH {
				continue // the thread exited meanwhile
			}
			if err != nil {
				return nil, openError(err, attr, ev)
			}
			r.fds = append(r.fds, fd)
			if opt.Assist != 0 {
				if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, opt.Assist); err != nil {
					return nil, fmt.Errorf("%w: %v", ErrAssist, err)
				}
			}
			if owner, ok := first[cpu]; ok {
				if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_OUTPUT, owner); err != nil {
					return nil, fmt.Errorf("redirecting event output on CPU %d: %w", cpu, err)
				}
				continue
			}
			first[cpu] = fd
			rb, err := mapRing(fd, opt.BufferPages)
			if err != nil {
				return nil, err
			}
			r.bufs = append(r.bufs, rb)
			r.pfds = append(r.pfds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
		}
	}
	if len(r.fds) == 0 {
		return nil, fmt.Errorf("no thread to record: all exited")
	}
	dec, err := perfdata.NewDecoder([]*perfdata.Attr{attr}, nil)
	if err != nil {
		return nil, err
	}
	r.dec = dec
	ok = true
	return r, nil
}

// targetName names an event's target as the user chose it.
func targetName(et eventTarget) string {
	switch {
	case et.cgroup:
		return "the cgroup"
	case et.pid < 0:
		return "every process (system-wide)"
	}
	return fmt.Sprintf("process %d", processOf(et.pid))
}

func openError(err error, attr *perfdata.Attr, et eventTarget) error {
	target := targetName(et)
	switch err {
	case unix.EACCES, unix.EPERM:
		return permissionError(err, attr, et)
	case unix.ENOENT, unix.ENODEV, unix.EOPNOTSUPP:
		return fmt.Errorf("perf_event_open on %s: %w: the kernel lacks the cpu-clock software event or user stack sampling", target, err)
	case unix.EINVAL:
		return fmt.Errorf("perf_event_open on %s: %w: the kernel rejected the event (frequency above kernel.perf_event_max_sample_rate, or a kernel older than 4.x?)", target, err)
	}
	return fmt.Errorf("perf_event_open on %s: %w", target, err)
}

// Enable starts counting on every event.
func (r *Recorder) Enable() error {
	for _, fd := range r.fds {
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
			return fmt.Errorf("enabling perf event: %w", err)
		}
	}
	return nil
}

// Disable stops counting; buffered records can still be read.
func (r *Recorder) Disable() {
	for _, fd := range r.fds {
		unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0)
	}
}

// Close unmaps the buffers and closes the events.
func (r *Recorder) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	for _, b := range r.bufs {
		b.unmap()
	}
	for _, fd := range r.fds {
		unix.Close(fd)
	}
	return nil
}

// Wait blocks until a buffer has reached its wakeup watermark, an event
// ended, or timeout passed. It returns true when an event has hung up (its
// task exited).
func (r *Recorder) Wait(timeout time.Duration) bool {
	for i := range r.pfds {
		r.pfds[i].Revents = 0
	}
	n, err := unix.Poll(r.pfds, int(timeout/time.Millisecond))
	if err != nil || n == 0 {
		return false
	}
	hup := false
	for _, p := range r.pfds {
		if p.Revents&(unix.POLLHUP|unix.POLLERR) != 0 {
			hup = true
		}
	}
	return hup
}

// Read drains every ring buffer, calling fn with each record decoded. The
// Record is valid only during the call. Lost records are counted (see
// Lost) and delivered as well.
func (r *Recorder) Read(fn func(rec *perfdata.Record) error) error {
	for _, b := range r.bufs {
		if err := b.drain(func(raw []byte, off int64) error {
			if err := r.dec.Decode(raw, off, &r.rec); err != nil {
				return err
			}
			r.records.Add(1)
			switch r.rec.Type {
			case perfdata.RecordLost, perfdata.RecordLostSamples:
				r.lost.Add(r.rec.Lost)
			case perfdata.RecordSample:
				r.samples.Add(1)
				r.noteCopy(r.rec.Sample)
			}
			return fn(&r.rec)
		}); err != nil {
			return err
		}
	}
	return nil
}

// AttachPID records every thread of the running process pid, and the
// threads and children they create later. Counting starts at once.
func AttachPID(pid int, opt Options) (*Recorder, error) {
	var r *Recorder
	seen := map[int]bool{}
	// Threads created while events are being opened are inherited only
	// from threads that already have one: rescan until no new thread.
	for round := 0; round < 10; round++ {
		tids, err := threadsOf(pid)
		if err != nil {
			if r != nil {
				r.Close()
			}
			return nil, err
		}
		var fresh []int
		for _, t := range tids {
			if !seen[t] {
				seen[t] = true
				fresh = append(fresh, t)
			}
		}
		if len(fresh) == 0 {
			break
		}
		nr, err := open(fresh, opt, false)
		if err != nil {
			if r != nil {
				r.Close()
			}
			return nil, err
		}
		if r == nil {
			r = nr
		} else {
			r.merge(nr)
		}
		if err := nr.Enable(); err != nil {
			r.Close()
			return nil, err
		}
	}
	return r, nil
}

// merge takes over o's events and buffers.
func (r *Recorder) merge(o *Recorder) {
	r.fds = append(r.fds, o.fds...)
	r.bufs = append(r.bufs, o.bufs...)
	r.pfds = append(r.pfds, o.pfds...)
	o.fds, o.bufs, o.pfds = nil, nil, nil
	// Both decode with equal attributes; keep r's decoder.
}

func threadsOf(pid int) ([]int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no process %d", pid)
		}
		return nil, err
	}
	var tids []int
	for _, e := range ents {
		if t, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, t)
		}
	}
	return tids, nil
}

// Command is a program started under recording.
type Command struct {
	*exec.Cmd
	release *os.File
}

// StartCommand starts argv with counting enabled on its exec: the program
// is started through /bin/sh, which waits for rewind to open the events on
// it (disabled, enable-on-exec, inherited) and then execs argv, so the
// recording covers the program from its first instruction and nothing of
// the shell. stdin is rewind's; stdout and stderr too unless Options say.
// When argv[0] cannot be run the error is a *NotRunnableError.
func StartCommand(argv []string, opt Options) (*Recorder, *Command, error) {
	c, err := HoldCommand(argv, opt.Stdout, opt.Stderr)
	if err != nil {
		return nil, nil, err
	}
	r, err := open([]int{c.Process.Pid}, opt, true)
	if err != nil {
		c.Abandon()
		return nil, nil, err
	}
	return r, c, nil
}

// HoldCommand starts argv held before its exec, as StartCommand does,
// without opening events on it: the caller sets up what must see the
// program from its first instruction and then Releases it, or Abandons
// it. Its process ID is the program's; until the release it runs
// /bin/sh. stdout and stderr default to rewind's own.
func HoldCommand(argv []string, stdout, stderr io.Writer) (*Command, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("no command to run")
	}
	if err := Runnable(argv[0]); err != nil {
		return nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	// The program is exec'd only on the go-ahead word Release writes: a
	// pipe closed without it (rewind died, or Abandoned the command)
	// makes read fail or read something else, and the shell exits.
	script := `IFS= read -r rewind_go <&3; [ "$rewind_go" = ` + releaseWord + ` ] || exit 125; exec 3<&-; exec "$@"`
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, "rewind-record"}, argv...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if stdout != nil {
		cmd.Stdout = stdout
	}
	if stderr != nil {
		cmd.Stderr = stderr
	}
	cmd.ExtraFiles = []*os.File{pr}
	// Tied to rewind's life: the program dies with rewind (kill -9
	// included) instead of running on, reparented, unrecorded.
	if err := StartTied(cmd); err != nil {
		pr.Close()
		pw.Close()
		return nil, err
	}
	pr.Close()
	return &Command{Cmd: cmd, release: pw}, nil
}

// Abandon kills a held command that will not be released, and reaps it.
func (c *Command) Abandon() {
	c.release.Close()
	c.Process.Kill()
	c.Wait()
}

// NotRunnableError says why a command cannot be started: its program is
// not found, or is not an executable file.
type NotRunnableError struct {
	Name string
	Err  error // fs.ErrNotExist, exec.ErrNotFound, fs.ErrPermission, ...
}

func (e *NotRunnableError) Error() string {
	switch {
	case errors.Is(e.Err, exec.ErrNotFound):
		return fmt.Sprintf("cannot run %s: not found in $PATH", e.Name)
	case errors.Is(e.Err, os.ErrPermission):
		return fmt.Sprintf("cannot run %s: not an executable file (or permission denied)", e.Name)
	case errors.Is(e.Err, os.ErrNotExist):
		return fmt.Sprintf("cannot run %s: no such file", e.Name)
	}
	return fmt.Sprintf("cannot run %s: %v", e.Name, e.Err)
}

func (e *NotRunnableError) Unwrap() error { return e.Err }

// ExitStatus is the status a shell exits with for the same failure: 127
// for a program not found, 126 for one it cannot execute.
func (e *NotRunnableError) ExitStatus() int {
	if errors.Is(e.Err, os.ErrPermission) || errors.Is(e.Err, unix.EISDIR) {
		return 126
	}
	return 127
}

// Runnable checks that the program name (a path, or a name looked up in
// $PATH) can be started: nil, or a *NotRunnableError.
func Runnable(name string) error {
	_, err := exec.LookPath(name)
	if err == nil {
		return nil
	}
	var ee *exec.Error
	if errors.As(err, &ee) {
		err = ee.Err
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return &NotRunnableError{Name: name, Err: err}
}

// releaseWord is the go-ahead Release writes to the held shell: only this
// word lets it exec the program.
const releaseWord = "rewind-go"

// Release lets the command exec the program.
func (c *Command) Release() error {
	_, err := c.release.Write([]byte(releaseWord + "\n"))
	c.release.Close()
	return err
}
