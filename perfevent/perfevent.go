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
	return a
}

// PermissionHint explains what perf_event_open needs, for error messages.
func PermissionHint() string {
	p := "unknown"
	if b, err := os.ReadFile("/proc/sys/kernel/perf_event_paranoid"); err == nil {
		p = strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("kernel.perf_event_paranoid is %s; profiling needs root or CAP_PERFMON, "+
		"or perf_event_paranoid <= 2 for your own processes without kernel frames (<= 1 with them), "+
		"and ptrace permission over the target (sysctl kernel.perf_event_paranoid=1 as root lowers it)", p)
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
				return nil, openError(err, ev.pid)
			}
			r.fds = append(r.fds, fd)
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

func openError(err error, tid int) error {
	switch err {
	case unix.EACCES, unix.EPERM:
		return fmt.Errorf("perf_event_open on thread %d: %w: %s", tid, err, PermissionHint())
	case unix.ENOENT, unix.ENODEV, unix.EOPNOTSUPP:
		return fmt.Errorf("perf_event_open on thread %d: %w: the kernel lacks the cpu-clock software event or user stack sampling", tid, err)
	case unix.EINVAL:
		return fmt.Errorf("perf_event_open on thread %d: %w: the kernel rejected the event (frequency above kernel.perf_event_max_sample_rate, or a kernel older than 4.x?)", tid, err)
	}
	return fmt.Errorf("perf_event_open on thread %d: %w", tid, err)
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
func StartCommand(argv []string, opt Options) (*Recorder, *Command, error) {
	if len(argv) == 0 {
		return nil, nil, fmt.Errorf("no command to run")
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		return nil, nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	script := `read _ <&3; exec 3<&-; exec "$@"`
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, "rewind-record"}, argv...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if opt.Stdout != nil {
		cmd.Stdout = opt.Stdout
	}
	if opt.Stderr != nil {
		cmd.Stderr = opt.Stderr
	}
	cmd.ExtraFiles = []*os.File{pr}
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return nil, nil, err
	}
	pr.Close()
	c := &Command{Cmd: cmd, release: pw}
	r, err := open([]int{cmd.Process.Pid}, opt, true)
	if err != nil {
		pw.Close()
		cmd.Process.Kill()
		cmd.Wait()
		return nil, nil, err
	}
	return r, c, nil
}

// Release lets the command exec the program.
func (c *Command) Release() error {
	_, err := c.release.Write([]byte("go\n"))
	c.release.Close()
	return err
}
