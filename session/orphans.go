package session

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// endOrphans ends the processes the command left behind when the session
// ended it: as a subreaper, this process inherits them when their parents
// die. SIGTERM, SIGKILL after grace, and reaped; it gives up after twice
// grace (a process in uninterruptible sleep), saying so to warn.
func endOrphans(grace time.Duration, warn func(string)) {
	start := time.Now()
	for sig := unix.SIGTERM; ; time.Sleep(20 * time.Millisecond) {
		kids := childrenOf(os.Getpid())
		if len(kids) == 0 {
			return
		}
		if time.Since(start) > grace {
			sig = unix.SIGKILL
		}
		if time.Since(start) > 2*grace {
			if warn != nil {
				warn(fmt.Sprintf("processes the command started did not end: %v", kids))
			}
			return
		}
		for _, pid := range kids {
			unix.Kill(pid, sig)
			var ws unix.WaitStatus
			unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		}
	}
}

// reapOrphans reaps the processes inherited as a subreaper (the command's
// orphans) that have exited, so that they do not stay zombies until the
// recording ends. The command itself, keep, is left to its Wait: each
// exited child is looked at first without reaping it, and the search
// stops at the command.
func reapOrphans(keep int) {
	for range 64 {
		var info unix.Siginfo
		if unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil) != nil {
			return
		}
		// si_pid follows si_signo, si_errno, si_code and padding on
		// 64-bit Linux.
		pid := int(*(*int32)(unsafe.Add(unsafe.Pointer(&info), 16)))
		if pid <= 0 || pid == keep {
			return
		}
		var ws unix.WaitStatus
		if n, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); n != pid || err != nil {
			return
		}
	}
}

// childrenOf lists the processes whose parent is pid (from /proc/*/stat).
func childrenOf(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parens.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

// EndOrphans ends, as endCommand does for a Session with AdoptOrphans,
// the processes a command left behind: for a recording made without a
// Session (record --unwind-in kernel), whose process made itself the
// command's subreaper (PR_SET_CHILD_SUBREAPER).
func EndOrphans(grace time.Duration, warn func(string)) { endOrphans(grace, warn) }

// ReapOrphans reaps the exited processes this process inherited as a
// subreaper, leaving keep (the command, waited for by its owner) alone.
func ReapOrphans(keep int) { reapOrphans(keep) }
