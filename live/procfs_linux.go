package live

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rewindstack/rewind/internal/procmaps"
)

// testSkipWaiterCheck, set by tests only, captures a child of this
// process even while something waits for it, to test that the capture
// itself survives that.
var testSkipWaiterCheck bool

// pfKthread is PF_KTHREAD, the kernel-thread bit of the flags field of
// /proc/PID/stat (include/linux/sched.h).
const pfKthread = 0x00200000

// procStat is the part of /proc/PID/stat (or /proc/PID/task/TID/stat) a
// capture needs.
type procStat struct {
	comm  string
	state byte
	ppid  int
	flags uint64
}

func readStat(path string) (procStat, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return procStat{}, err
	}
	return parseStat(b)
}

// parseStat parses "pid (comm) state ppid pgrp session tty tpgid flags
// ...". comm may contain spaces and parentheses, so it ends at the last
// ')'.
func parseStat(b []byte) (procStat, error) {
	var st procStat
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return st, fmt.Errorf("malformed stat %q", b)
	}
	st.comm = string(b[open+1 : end])
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 7 || len(f[0]) != 1 {
		return st, fmt.Errorf("malformed stat %q", b)
	}
	st.state = f[0][0]
	st.ppid, _ = strconv.Atoi(f[1])
	st.flags, _ = strconv.ParseUint(f[6], 10, 64)
	return st, nil
}

// statusField returns the value of "Name:\tvalue" in a status file.
func statusField(b []byte, name string) string {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if len(line) > len(name) && line[len(name)] == ':' && string(line[:len(name)]) == name {
			return strings.TrimSpace(string(line[len(name)+1:]))
		}
	}
	return ""
}

// listTasks returns the TIDs in /proc/PID/task, unsorted. It uses bare
// system calls, as it runs inside the pause.
func listTasks(pid int) ([]int, error) {
	fd, err := openRetry(fmt.Sprintf("/proc/%d/task", pid), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: fmt.Sprintf("/proc/%d/task", pid), Err: err}
	}
	defer unix.Close(fd)
	var buf [8192]byte
	var tids []int
	for {
		n, err := unix.Getdents(fd, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return tids, nil
		}
		b := buf[:n]
		for len(b) >= 19 {
			// struct linux_dirent64: ino u64, off u64, reclen u16, type
			// u8, name (NUL-terminated).
			reclen := int(b[16]) | int(b[17])<<8
			if reclen < 19 || reclen > len(b) {
				break
			}
			tid := 0
			for _, c := range b[19:reclen] {
				if c < '0' || c > '9' {
					if c != 0 {
						tid = -1
					}
					break
				}
				tid = tid*10 + int(c-'0')
			}
			if tid > 0 {
				tids = append(tids, tid)
			}
			b = b[reclen:]
		}
	}
}

// readProcFile reads a whole /proc file with bare system calls and as few
// reads as buf allows (os.ReadFile starts with a small buffer and grows
// it, which costs a read per doubling), appending to buf[:0].
func readProcFile(path string, buf []byte) ([]byte, error) {
	fd, err := openRetry(path, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

func openRetry(path string, flags int) (int, error) {
	for {
		fd, err := unix.Open(path, flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// threadName reads /proc/PID/task/TID/comm.
func threadName(pid, tid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/comm", pid, tid))
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(b), "\n")
}

// taskGone reports whether thread tid of pid has exited (no longer
// listed, or a zombie waiting to be reaped).
func taskGone(pid, tid int) bool {
	st, err := readStat(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
	return err != nil || st.state == 'Z' || st.state == 'X'
}

// Exited reports whether every thread of process pid has exited (no
// longer listed, or a zombie waiting to be reaped): a process rewind
// records or watches by PID has ended.
func Exited(pid int) bool { return processGone(pid) }

// processGone reports whether every thread of pid has exited.
func processGone(pid int) bool {
	tids, err := listTasks(pid)
	if err != nil {
		return true
	}
	for _, tid := range tids {
		if !taskGone(pid, tid) {
			return false
		}
	}
	return true
}

// procInfo is what inspect learns about a process before stopping it.
type procInfo struct {
	pid  int
	comm string
	exe  string
	ppid int
}

// inspect checks that pid is a process that can be captured and returns
// its thread group id (pid itself, unless pid is the TID of a thread that
// is not the main one), name and executable. Its errors say what is wrong
// and what to do about it.
func inspect(pid int) (procInfo, error) {
	info := procInfo{pid: pid}
	if pid <= 0 {
		return info, fmt.Errorf("live: invalid process id %d", pid)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return info, kindErrorf(os.ErrNotExist, "live: no such process: %d", pid)
		}
		return info, fmt.Errorf("live: process %d: %w", pid, err)
	}
	if tgid, err := strconv.Atoi(statusField(status, "Tgid")); err == nil && tgid > 0 {
		info.pid = tgid
	}
	if info.pid == os.Getpid() {
		what := "process %d is this process"
		if pid != info.pid {
			what = "thread %d belongs to this process"
		}
		return info, kindErrorf(ErrSelf, "live: "+what+"; a process cannot stop its own threads with ptrace, so capture it from another process", pid)
	}
	st, err := readStat(fmt.Sprintf("/proc/%d/stat", info.pid))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return info, kindErrorf(os.ErrNotExist, "live: no such process: %d", pid)
		}
		return info, fmt.Errorf("live: process %d: %w", info.pid, err)
	}
	info.comm = st.comm
	info.ppid = st.ppid
	if st.ppid == os.Getpid() && !testSkipWaiterCheck {
		if err := checkWaiters(info.pid); err != nil {
			return info, err
		}
	}
	if st.flags&pfKthread != 0 {
		return info, kindErrorf(ErrKernelThread, "live: process %d (%s) is a kernel thread: it has no user-space stack to capture", info.pid, st.comm)
	}
	if (st.state == 'Z' || st.state == 'X') && processGone(info.pid) {
		return info, kindErrorf(ErrZombie, "live: process %d (%s) is a zombie: it has exited and has no stacks (its parent, process %d, has not reaped it yet)", info.pid, st.comm, st.ppid)
	}
	info.exe = readExe(info.pid)
	return info, nil
}

// readExe reads /proc/PID/exe. When the main thread has exited (and the
// process lives on in other threads) the link is unreadable there, so
// other threads' links are tried.
func readExe(pid int) string {
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil {
		return strings.TrimSuffix(exe, procmaps.DeletedSuffix)
	}
	tids, _ := listTasks(pid)
	for _, tid := range tids {
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/task/%d/exe", pid, tid)); err == nil {
			return strings.TrimSuffix(exe, procmaps.DeletedSuffix)
		}
	}
	return ""
}

// permissionError explains an EPERM from PTRACE_SEIZE.
func permissionError(pid int, comm string, err error) error {
	var b strings.Builder
	if os.Geteuid() == 0 {
		fmt.Fprintf(&b, "live: cannot trace process %d (%s): %v: %s", pid, comm, err, rootPermissionCause(pid))
		return &kindError{kind: err, msg: b.String()}
	}
	fmt.Fprintf(&b, "live: cannot trace process %d (%s): %v: run rewind as root or give it CAP_SYS_PTRACE (setcap cap_sys_ptrace=ep rewind); without it, the target must run as your user and be dumpable", pid, comm, err)
	if v, rerr := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope"); rerr == nil {
		scope := strings.TrimSpace(string(v))
		fmt.Fprintf(&b, "; kernel.yama.ptrace_scope is %s", scope)
		switch scope {
		case "1":
			b.WriteString(", which lets a process trace only its descendants without CAP_SYS_PTRACE: set it to 0 (sysctl kernel.yama.ptrace_scope=0) or use root")
		case "2":
			b.WriteString(", which lets only CAP_SYS_PTRACE holders trace")
		case "3":
			b.WriteString(", which disables ptrace until the next reboot")
		}
	}
	return &kindError{kind: err, msg: b.String()}
}

// tracedError explains an EPERM from PTRACE_SEIZE on a thread that
// another tracer holds, or returns nil if tid has no tracer. When that
// tracer is another rewind (a capture of the same process in progress)
// the error is a *busyError.
func tracedError(pid, tid int) error {
	// TracerPid is the tracer's thread id: name its process.
	tracerTID := tracerOf(pid, tid)
	if tracerTID == 0 {
		return nil
	}
	tracer := tracerTID
	if tgid := processOf(tracerTID); tgid > 0 {
		tracer = tgid
	}
	if tracer == os.Getpid() {
		return kindErrorf(ErrTraced, "live: thread %d of process %d is being captured by this process already", tid, pid)
	}
	name := "?"
	if st, err := readStat(fmt.Sprintf("/proc/%d/stat", tracer)); err == nil {
		name = st.comm
	}
	rewind := isRewind(tracer, name)
	if tracerOf(pid, tid) != tracerTID {
		// It let go meanwhile (it may have exited): what was read of it
		// may be of no tracer at all.
		return errTracerLeft
	}
	if rewind {
		return &busyError{pid: pid, tid: tid, tracer: tracer, tracerTID: tracerTID}
	}
	return kindErrorf(ErrTraced, "live: thread %d of process %d is traced by process %d (%s); detach that debugger or tracer first", tid, pid, tracer, name)
}

// errTracerLeft is returned by tracedError when the tracer let go of the
// thread while it was being looked at.
var errTracerLeft = errors.New("the tracer let go")

// processOf returns the process (thread group) of thread tid, or 0.
func processOf(tid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", tid))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(statusField(b, "Tgid"))
	return n
}

// isRewind reports whether process pid, named comm, is another rewind:
// one named rewind, or one running this program's executable.
func isRewind(pid int, comm string) bool {
	if comm == "rewind" {
		return true
	}
	self, err1 := os.Readlink("/proc/self/exe")
	other, err2 := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return err1 == nil && err2 == nil && self == other
}

// busyError says that another rewind process holds a thread of the
// process: it is capturing it too. Capture waits for it to let go
// (Options.BusyWait) before it returns this error.
type busyError struct {
	pid, tid  int
	tracer    int // the other rewind's PID
	tracerTID int // its thread that traces tid
	waited    time.Duration
}

func (e *busyError) Error() string {
	msg := fmt.Sprintf("live: process %d is being dumped by rewind (PID %d)", e.pid, e.tracer)
	if e.waited > 0 {
		msg += fmt.Sprintf(", which did not let go of it within %v", e.waited.Round(time.Millisecond))
	}
	return msg
}

// Unwrap classifies the error as ErrBusy and ErrTraced.
func (e *busyError) Unwrap() []error { return []error{ErrBusy, ErrTraced} }

// pfExiting is PF_EXITING, set in the flags of /proc/PID/task/TID/stat
// once a thread has begun to exit (include/linux/sched.h).
const pfExiting = 0x00000004

// threadExiting reports whether thread tid of pid has exited or begun to
// exit: PTRACE_SEIZE refuses such a thread with EPERM.
func threadExiting(pid, tid int) bool {
	st, err := readStat(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
	return err != nil || st.state == 'Z' || st.state == 'X' || st.flags&pfExiting != 0
}

// readFile reads a /proc file (see readProcFile).
func readFile(path string, buf []byte) ([]byte, error) { return readProcFile(path, buf) }

// tracerOf returns the TracerPid of thread tid of pid (a thread id; 0 when
// untraced or gone).
func tracerOf(pid, tid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/status", pid, tid))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(statusField(b, "TracerPid"))
	return n
}

// capSysPtrace is CAP_SYS_PTRACE's bit in /proc/PID/status's Cap* masks.
const capSysPtrace = 19

// rootPermissionCause explains why root may not trace pid: root without
// CAP_SYS_PTRACE (a container that drops it), a Yama policy, or a target
// in a user namespace rewind has no say over.
func rootPermissionCause(pid int) string {
	var causes []string
	if capEff, ok := statusHex("/proc/self/status", "CapEff:"); ok && capEff&(1<<capSysPtrace) == 0 {
		causes = append(causes, "rewind runs as root but without CAP_SYS_PTRACE in its effective capabilities "+
			"(containers drop it by default: run the container with --cap-add SYS_PTRACE, or rewind on the host)")
	}
	if v, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope"); err == nil && strings.TrimSpace(string(v)) == "3" {
		causes = append(causes, "kernel.yama.ptrace_scope is 3, which disables ptrace for everyone until the next reboot")
	}
	self, err1 := os.Readlink("/proc/self/ns/user")
	other, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/user", pid))
	if err1 == nil && err2 == nil && self != other {
		causes = append(causes, fmt.Sprintf("process %d is in another user namespace (%s, rewind in %s), where rewind's root has no privilege", pid, other, self))
	}
	if len(causes) == 0 {
		c := "the kernel refused although rewind runs as root with CAP_SYS_PTRACE"
		mine, ok1 := statusHex("/proc/self/status", "CapPrm:")
		theirs, ok2 := statusHex(fmt.Sprintf("/proc/%d/status", pid), "CapPrm:")
		if ok1 && ok2 && theirs&^mine != 0 {
			c += fmt.Sprintf(": process %d holds capabilities rewind lacks (CapPrm %#x, rewind %#x, so rewind runs in a sandbox below it)", pid, theirs, mine)
		}
		if pid == 1 {
			c += "; process 1 is this namespace's init"
		}
		causes = append(causes, c+"; a security module or sandbox (Landlock, SELinux, AppArmor, seccomp) forbids tracing it from here")
	}
	return strings.Join(causes, "; ")
}

// statusHex reads a hexadecimal field (CapEff: ...) of a status file.
func statusHex(path, key string) (uint64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return n, err == nil
		}
	}
	return 0, false
}
