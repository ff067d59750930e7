package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/testutil/perftest"
)

// TestRecordDurationEndsCommand: with -d, a command rewind started is
// ended (SIGTERM) and reaped when the duration is up; no process is left.
func TestRecordDurationEndsCommand(t *testing.T) {
	perftest.RequirePerfEvent(t)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	out := filepath.Join(dir, "p.folded")
	start := time.Now()
	_, errOut, code := run(t, "record", "-q", "-d", "1", "-o", out, "--", "sh", "-c", "echo $$ > "+pidFile+"; exec sleep 60")
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("record -d 1 took %v", took)
	}
	if code != 0 {
		t.Fatalf("record -d 1: exit %d\n%s", code, errOut)
	}
	pid := readPIDFile(t, pidFile)
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
		t.Errorf("the command (pid %d) outlived rewind record -d 1", pid)
	}
}

// TestRecordFailingCommand: a command that exits at once (false, true, a
// shell killed by a signal) or cannot be run makes record exit with its
// status, as perf record does (a shell's 127 and 126 for a program not
// found or not executable), in every --unwind-in mode; with samples the
// profile is written (a loaded machine may sample even false), without
// any the one line says so and no empty profile is left. Nothing is said
// of /proc (the kernel walk once described a command already gone).
func TestRecordFailingCommand(t *testing.T) {
	perftest.RequirePerfEvent(t)
	dir := t.TempDir()
	noExec := filepath.Join(dir, "noexec")
	if err := os.WriteFile(noExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A command that cannot be run is refused before --unwind-in matters
	// (once is enough), the others go through each mode's recording;
	// auto is kernel where BPF loads, else user: once too.
	cases := []struct {
		argv  []string
		code  int
		says  string // for a command that cannot be run
		modes string
	}{
		{[]string{"false"}, 1, "", "user kernel auto"},
		{[]string{"true"}, 0, "", "user kernel"},
		{[]string{"sh", "-c", "kill -TERM $$"}, 128 + int(syscall.SIGTERM), "", "user kernel"},
		{[]string{filepath.Join(dir, "missing")}, 127, "cannot run " + filepath.Join(dir, "missing") + ": no such file", "auto"},
		{[]string{"rewind-no-such-command"}, 127, "cannot run rewind-no-such-command: not found in $PATH", "auto"},
		{[]string{noExec}, 126, "cannot run " + noExec + ": not an executable file", "user"},
	}
	for _, in := range []string{"user", "kernel", "auto"} {
		for _, c := range cases {
			if !strings.Contains(c.modes, in) {
				continue
			}
			out := filepath.Join(dir, in+".folded")
			os.Remove(out)
			args := append([]string{"record", "-q", "-F", "1", "--unwind-in", in, "-o", out, "--"}, c.argv...)
			_, errOut, code := run(t, args...)
			if in == "kernel" && strings.Contains(errOut, "--unwind-in kernel:") {
				t.Logf("--unwind-in kernel left out: %s", errOut)
				break
			}
			what := fmt.Sprintf("--unwind-in %s: record -- %s", in, strings.Join(c.argv, " "))
			_, statErr := os.Stat(out)
			wrote := strings.Contains(errOut, "rewind: wrote "+out)
			switch {
			case code != c.code:
				t.Errorf("%s: exit %d, want %d:\n%s", what, code, c.code, errOut)
			case c.says != "":
				if !strings.Contains(errOut, "rewind record: "+c.says) || strings.Count(strings.TrimSpace(errOut), "\n") > 0 || statErr == nil {
					t.Errorf("%s: want one line %q and no profile:\n%s", what, c.says, errOut)
				}
			case wrote != (statErr == nil):
				t.Errorf("%s: says it wrote the profile: %v, wrote it: %v\n%s", what, wrote, statErr == nil, errOut)
			case !wrote && !regexp.MustCompile(`rewind: no samples: the command exited after (\d+ ms|\d+\.\d s)[^\n]*; no profile written\n`).MatchString(errOut):
				t.Errorf("%s: no profile and no line saying why:\n%s", what, errOut)
			}
			if strings.Contains(errOut, "/proc/") {
				t.Errorf("%s: says something of /proc:\n%s", what, errOut)
			}
		}
	}
}

// TestRecordDurationEndsOrphans: what the command started in the
// background (a script's server, say) ends with it when the duration is
// up, even when its parent died first; none is left running.
func TestRecordDurationEndsOrphans(t *testing.T) {
	perftest.RequirePerfEvent(t)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	out := filepath.Join(dir, "p.folded")
	_, errOut, code := run(t, "record", "-q", "-d", "1", "-o", out, "--", "sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $! > "+pidFile+"; wait")
	if code != 0 {
		t.Fatalf("record -d 1: exit %d\n%s", code, errOut)
	}
	pid := readPIDFile(t, pidFile)
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("the command's background process (pid %d) outlived rewind record -d 1", pid)
	}
}

// readPIDFile returns the process ID a fixture command wrote to path.
func readPIDFile(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 0 {
		t.Fatalf("bad pid file %q", b)
	}
	return pid
}

// TestRecordReapsOrphans: a process the command left behind (rewind
// inherits it as a subreaper) that exits while the recording goes on is
// reaped then, not left a zombie until rewind exits. The command lists
// rewind's zombie children after its orphan has had time to exit.
func TestRecordReapsOrphans(t *testing.T) {
	perftest.RequirePerfEvent(t)
	dir := t.TempDir()
	zombies := filepath.Join(dir, "zombies")
	out := filepath.Join(dir, "p.folded")
	script := `(sleep 0.1 &); sleep 1.5; ` +
		`for f in $(grep -lE "^PPid:[[:space:]]+$PPID\$" /proc/[0-9]*/status 2>/dev/null); do ` +
		`grep -qE "^State:[[:space:]]+Z" $f && echo $f; done > ` + zombies + `; true`
	_, errOut, code := run(t, "record", "-q", "-o", out, "--", "sh", "-c", script)
	if code != 0 {
		t.Fatalf("record: exit %d\n%s", code, errOut)
	}
	b, err := os.ReadFile(zombies)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 0 {
		t.Errorf("zombie children of rewind while it recorded:\n%s", b)
	}
}
