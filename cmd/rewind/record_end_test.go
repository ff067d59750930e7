package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/perftest"
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

// TestRecordFailingCommand: a command that fails before any sample makes
// record fail and leaves no empty profile behind. At 1 Hz `false` is
// almost never sampled; when a loaded machine does sample it (the kernel
// walk counts its exit too), the profile of those samples is written as
// for any command, and record says how many it took.
func TestRecordFailingCommand(t *testing.T) {
	perftest.RequirePerfEvent(t)
	for _, in := range []string{"user", "auto"} {
		out := filepath.Join(t.TempDir(), "p.folded")
		_, errOut, code := run(t, "record", "-q", "-F", "1", "--unwind-in", in, "-o", out, "--", "false")
		_, statErr := os.Stat(out)
		switch {
		case code != 0 && statErr == nil:
			t.Errorf("--unwind-in %s: record -- false failed (exit %d) but wrote %s", in, code, out)
		case code != 0 && !strings.Contains(errOut, "before any sample: no profile written"):
			t.Errorf("--unwind-in %s: record -- false exited %d without saying why:\n%s", in, code, errOut)
		case code == 0 && (statErr != nil || strings.Contains(errOut, ": 0 samples")):
			t.Errorf("--unwind-in %s: record -- false exited 0 with no sample taken:\n%s", in, errOut)
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
