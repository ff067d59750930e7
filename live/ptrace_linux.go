package live

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Thin ptrace wrappers. They must run on the tracer thread (see tracer).

func ptrace(req int, tid int, addr, data uintptr) error {
	for {
		_, _, e := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(tid), addr, data, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return e
		}
		return nil
	}
}

func ptraceSeize(tid int) error     { return ptrace(unix.PTRACE_SEIZE, tid, 0, 0) }
func ptraceInterrupt(tid int) error { return ptrace(unix.PTRACE_INTERRUPT, tid, 0, 0) }

// ptraceDetach detaches tid, delivering sig (0 for none) as it resumes.
func ptraceDetach(tid int, sig int) error {
	return ptrace(unix.PTRACE_DETACH, tid, 0, uintptr(sig))
}

// ntPRStatus is the regset of the general registers (NT_PRSTATUS).
const ntPRStatus = 1

// getRegset reads tid's NT_PRSTATUS register set into buf and returns how
// many bytes the kernel filled (the native user_regs_struct size, or the
// smaller compat one for a 32-bit tracee). It fails with ESRCH when tid is
// not a stopped tracee of this thread.
func getRegset(tid int, buf []uint64) (int, error) {
	iov := unix.Iovec{Base: (*byte)(unsafe.Pointer(&buf[0]))}
	iov.SetLen(len(buf) * 8)
	err := ptrace(unix.PTRACE_GETREGSET, tid, ntPRStatus, uintptr(unsafe.Pointer(&iov)))
	return int(iov.Len), err
}

// wait4 waits for tid without blocking. It returns (tid, status) for a
// reported event, (0, _) when there is nothing to report yet.
func wait4(tid int) (int, unix.WaitStatus, error) {
	var ws unix.WaitStatus
	for {
		wpid, err := unix.Wait4(tid, &ws, unix.WNOHANG|unix.WALL, nil)
		if err == unix.EINTR {
			continue
		}
		return wpid, ws, err
	}
}

// stopSignal returns the signal a stopped tracee's stop holds back (0 for
// a PTRACE_EVENT_STOP stop: the interrupt trap or a group-stop), from its
// siginfo. It serves stops whose wait report went to another thread.
func stopSignal(tid int) (int, error) {
	// siginfo_t is 128 bytes: si_signo, si_errno, si_code (int32 each)
	// come first.
	var si [32]int32
	if err := ptrace(unix.PTRACE_GETSIGINFO, tid, 0, uintptr(unsafe.Pointer(&si[0]))); err != nil {
		return 0, err
	}
	if si[2]>>8 == unix.PTRACE_EVENT_STOP {
		return 0, nil
	}
	return int(si[0]), nil
}

// waitNoReap is wait4 for the main thread of a child of this process: it
// reports a ptrace stop as wait4 does, but only looks at an exit
// (WNOWAIT), leaving the exit status to the parent's own wait (Cmd.Wait,
// say). An exit is reported as wait4 would, with the thread left a
// zombie.
func waitNoReap(tid int) (int, unix.WaitStatus, error) {
	pid, code, status, err := waitid(tid, unix.WSTOPPED)
	if err != nil || pid != 0 {
		// A ptrace stop's status holds the stop signal and the event
		// (PTRACE_EVENT_STOP << 8), as wait4's status does above bit 8.
		return pid, unix.WaitStatus(status<<8 | 0x7f), err
	}
	pid, code, status, err = waitid(tid, unix.WEXITED|unix.WNOWAIT)
	switch {
	case err != nil || pid == 0:
		return pid, 0, err
	case code == cldExited:
		return pid, unix.WaitStatus(status&0xff) << 8, nil
	case code == cldKilled || code == cldDumped:
		return pid, unix.WaitStatus(status & 0x7f), nil
	}
	// A tracee's stops are reported whatever the flags: one came in
	// since the first call. The next call collects it.
	return 0, 0, nil
}

// si_code values of SIGCHLD: the child called exit, or a signal killed it
// (and dumped its core).
const (
	cldExited = 1
	cldKilled = 2
	cldDumped = 3
)

// waitid waits for tid without blocking, for the events of flags
// (WSTOPPED, WEXITED, WNOWAIT), and returns the thread's id (0 when there
// is nothing to report), si_code and si_status.
func waitid(tid int, flags int) (pid int, code, status int32, err error) {
	for {
		// siginfo_t for SIGCHLD: si_signo, si_errno, si_code, padding,
		// then si_pid, si_uid, si_status (int32 each) on 64-bit Linux.
		var si unix.Siginfo
		err = unix.Waitid(unix.P_PID, tid, &si, flags|unix.WNOHANG|unix.WALL, nil)
		if err == unix.EINTR {
			continue
		}
		w := (*[32]int32)(unsafe.Pointer(&si))
		return int(w[4]), w[2], w[6], err
	}
}
