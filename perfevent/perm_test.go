package perfevent_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rewindstack/rewind/perfevent"
)

// TestUnprivileged runs the recorder as user nobody: with
// perf_event_paranoid 2 it must fall back to user-only sampling of its own
// command with a warning, and refuse another user's process, and the whole
// system, with an error that says what is needed and how to get it.
func TestUnprivileged(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to switch to user nobody")
	}
	b, err := os.ReadFile("/proc/sys/kernel/perf_event_paranoid")
	if err != nil || strings.TrimSpace(string(b)) != "2" {
		t.Skipf("written for kernel.perf_event_paranoid=2 (Linux's default), have %q", b)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// t.TempDir's parent is private to root: nobody could not reach it.
	dir, err := os.MkdirTemp("", "rewind-perfevent-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	exe := filepath.Join(dir, "perfevent.test")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestHelperUnprivileged$", "-test.v")
	cmd.Env = append(os.Environ(), "REWIND_PERFEVENT_HELPER=1")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	t.Logf("as nobody:\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"WARN kernel frames are not recorded: recording kernel frames needs root or CAP_PERFMON, or kernel.perf_event_paranoid <= 1 (it is 2)",
		"COMMAND ok",
		"ATTACH perf_event_open on process 1: permission denied: it is not yours to profile (kernel.perf_event_paranoid is 2, which allows only your own processes): " +
			"run rewind as root or give it CAP_PERFMON (setcap cap_perfmon=ep rewind)",
		"SYSTEM perf_event_open on every process (system-wide): permission denied: profiling every process needs root or CAP_PERFMON, " +
			"or kernel.perf_event_paranoid <= 0 (it is 2): run rewind as root or give it CAP_PERFMON (setcap cap_perfmon=ep rewind), " +
			"or lower it as root: sysctl kernel.perf_event_paranoid=0",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(string(out), "thread -1") {
		t.Errorf("a message names thread -1")
	}
}

func TestHelperUnprivileged(t *testing.T) {
	if os.Getenv("REWIND_PERFEVENT_HELPER") != "1" {
		t.Skip("helper of TestUnprivileged")
	}
	opt := perfevent.Options{Warn: func(s string) { fmt.Println("WARN", s) }, BufferPages: 8}
	rec, cmd, err := perfevent.StartCommand([]string{"/bin/true"}, opt)
	if err != nil {
		fmt.Println("COMMAND", err)
	} else {
		cmd.Release()
		cmd.Wait()
		rec.Close()
		fmt.Println("COMMAND ok")
	}
	if _, err := perfevent.AttachPID(1, opt); err != nil {
		fmt.Println("ATTACH", err)
	}
	if r, err := perfevent.OpenScope(perfevent.Scope{}, opt); err != nil {
		fmt.Println("SYSTEM", err)
	} else {
		r.Close()
	}
}
