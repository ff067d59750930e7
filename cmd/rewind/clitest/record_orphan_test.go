package clitest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestRecordCommandDiesWithRewind kills rewind record -- CMD with SIGKILL
// early (before or while the command is held before its exec), and 300 ms
// and 2 s after the command's program started, in both unwinding modes:
// the command must be gone within a second of rewind's end, not left
// running reparented to init (issue 38 item 4).
func TestRecordCommandDiesWithRewind(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("--unwind-in kernel needs root (BPF); run as root")
	}
	for _, mode := range []string{"kernel", "user"} {
		// at 0: as soon as the command's first process appears, most
		// often the shell held before its exec (--unwind-in user).
		for _, at := range []time.Duration{0, 10 * time.Millisecond, 300 * time.Millisecond, 2 * time.Second} {
			t.Run(fmt.Sprintf("%s/%v", mode, at), func(t *testing.T) {
				dir := t.TempDir()
				pidFile := filepath.Join(dir, "pid")
				// The pid file's path is in the command's arguments:
				// it names the command's processes in /proc, the
				// held shell's as well as the program's.
				script := `echo $$ >"$1.tmp" && mv "$1.tmp" "$1"; while :; do :; done`
				rw := exec.Command(rewindBin, "record", "-q", "--unwind-in", mode,
					"-o", filepath.Join(dir, "out.folded"), "--", "sh", "-c", script, "spin", pidFile)
				rw.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
				// A file, not a pipe: a command left running would
				// hold a pipe open, and Wait would wait for it.
				stderr, err := os.Create(filepath.Join(dir, "stderr"))
				if err != nil {
					t.Fatal(err)
				}
				defer stderr.Close()
				rw.Stderr = stderr
				if err := rw.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { killByArg(pidFile) })
				if at == 0 {
					deadline := time.Now().Add(60 * time.Second)
					// rewind's own arguments hold the path too.
					for time.Now().Before(deadline) {
						if n := len(procsWithArg(pidFile)); n > 1 || n == 1 && procsWithArg(pidFile)[0] != rw.Process.Pid {
							break
						}
					}
				}
				if at >= 300*time.Millisecond {
					// Counted from the program's start, which a
					// loaded machine may delay by seconds.
					deadline := time.Now().Add(60 * time.Second)
					for {
						if _, err := os.Stat(pidFile); err == nil {
							break
						}
						if time.Now().After(deadline) {
							rw.Process.Kill()
							rw.Wait()
							said, _ := os.ReadFile(stderr.Name())
							t.Fatalf("the command did not start within 60 s; rewind said:\n%s", said)
						}
						time.Sleep(5 * time.Millisecond)
					}
				}
				time.Sleep(at)
				rw.Process.Kill()
				rw.Wait()
				deadline := time.Now().Add(time.Second)
				for {
					left := procsWithArg(pidFile)
					if len(left) == 0 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("processes of the command still run 1 s after rewind was killed: %v", left)
					}
					time.Sleep(10 * time.Millisecond)
				}
			})
		}
	}
}

// procsWithArg returns the processes (not zombies: theirs is empty) whose
// command line holds arg as one of its arguments.
func procsWithArg(arg string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, a := range bytes.Split(b, []byte{0}) {
			if string(a) == arg {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// killByArg kills what procsWithArg finds, so that a failed test leaves
// no spinning program behind.
func killByArg(arg string) {
	for _, pid := range procsWithArg(arg) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}
