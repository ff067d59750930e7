package live

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// checkWaiters returns an error if a thread of this process is blocked in
// a wait that the stops of child pid would satisfy: wait4 or waitid on
// pid, on a pidfd of pid, on its process group, or on any child. It is a
// best effort: a wait that starts after the check is not seen.
func checkWaiters(pid int) error {
	self := os.Getpid()
	tids, err := listTasks(self)
	if err != nil {
		return nil
	}
	pgid, _ := unix.Getpgid(pid)
	for _, tid := range tids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/syscall", self, tid))
		if err != nil {
			continue
		}
		// "NR arg1 ... arg6 sp pc" while in a system call (NR decimal,
		// the rest hex), "running" or "-1 sp pc" otherwise.
		f := strings.Fields(string(b))
		if len(f) < 4 {
			continue
		}
		nr, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		arg := func(i int) int64 {
			v, _ := strconv.ParseUint(strings.TrimPrefix(f[i], "0x"), 16, 64)
			return int64(v)
		}
		waits := false
		switch nr {
		case unix.SYS_WAIT4:
			w := int32(arg(1)) // pid_t
			waits = int(w) == pid || w == -1 || (w == 0 && pgid == unix.Getpgrp()) || (w < -1 && int(-w) == pgid)
		case unix.SYS_WAITID:
			switch id := int32(arg(2)); arg(1) {
			case unix.P_ALL:
				waits = true
			case unix.P_PID:
				waits = int(id) == pid
			case unix.P_PGID:
				waits = int(id) == pgid || (id == 0 && pgid == unix.Getpgrp())
			case unix.P_PIDFD:
				waits = pidfdPid(self, int(id)) == pid
			}
		}
		if waits {
			return &kindError{kind: ErrWaitedChild, msg: fmt.Sprintf(
				"live: process %d is a child of this process, and thread %d of this process is waiting for it (os/exec's Cmd.Wait or os.Process.Wait?): "+
					"its wait would receive the capture's ptrace stops and return as if the process had stopped; wait for it only after capturing, or capture it from another process",
				pid, tid)}
		}
	}
	return nil
}

// pidfdPid returns the process a pidfd of process self refers to, or 0.
func pidfdPid(self, fd int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%d", self, fd))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(statusField(b, "Pid"))
	return n
}
