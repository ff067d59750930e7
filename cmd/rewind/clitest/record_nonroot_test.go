package clitest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// pySpin spins in Python code for the seconds it is given.
const pySpin = `import sys, time
def leaf(n):
    s = 0
    for i in range(n):
        s += i * i
    return s
end = time.time() + float(sys.argv[1])
while time.time() < end:
    leaf(20000)
`

// TestNonRootMessages runs rewind as user nobody, with Linux's default
// kernel.perf_event_paranoid 2, as a user without privileges does: every
// refusal names the privilege missing and how to give it ("run rewind as
// root or give it CAP_..."), states the sysctl's value beside the value
// needed without contradicting it, and never says "thread -1"; a
// recording of a Python program unwound in user space (BPF does not load)
// has its Python frames, read from the process at each sample, and says
// so in one line of the fidelity table.
func TestNonRootMessages(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running as nobody needs root")
	}
	if b, err := os.ReadFile("/proc/sys/kernel/perf_event_paranoid"); err != nil || strings.TrimSpace(string(b)) != "2" {
		t.Skipf("written for kernel.perf_event_paranoid=2 (Linux's default), have %q", b)
	}
	// A directory nobody can read and write: the binary, its output.
	dir, err := os.MkdirTemp("", "rewind-nonroot-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o777)
	bin := filepath.Join(dir, "rewind")
	b, err := os.ReadFile(rewindBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	spin := filepath.Join(dir, "spin.py")
	os.WriteFile(spin, []byte(pySpin), 0o644)
	asNobody := func(args ...string) (string, int) {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CACHE_HOME="+dir, "REWIND_CACHE_DIR="+filepath.Join(dir, "cache"))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, _ := cmd.CombinedOutput()
		return string(out), cmd.ProcessState.ExitCode()
	}
	need := regexp.MustCompile(`<= (-?\d+) \(it is (-?\d+)\)`)
	checkLines := func(t *testing.T, out string) {
		t.Helper()
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "thread -1") {
				t.Errorf("names thread -1: %s", l)
			}
			lower := strings.ToLower(l)
			if (strings.Contains(lower, "permission denied") || strings.Contains(lower, "not permitted") || strings.Contains(lower, "operation not permitted")) &&
				!strings.Contains(l, "run rewind as root") {
				t.Errorf("a refusal without the privilege and its fix: %s", l)
			}
			for _, m := range need.FindAllStringSubmatch(l, -1) {
				max, _ := strconv.Atoi(m[1])
				is, _ := strconv.Atoi(m[2])
				if max >= is {
					t.Errorf("says <= %d is needed although the value is %d: %s", max, is, l)
				}
			}
		}
	}
	cases := []struct {
		name string
		args []string
		code int
		want string // in one line of the output
	}{
		{"record-other-user", []string{"record", "-d", "1", "-o", filepath.Join(dir, "a.folded"), "-p", "1"}, 1,
			"profiling another user's process needs root, or CAP_PERFMON and CAP_SYS_PTRACE: run rewind as root or give it both (setcap cap_perfmon,cap_sys_ptrace=ep rewind)"},
		{"record-other-user-user-space", []string{"record", "--unwind-in", "user", "-d", "1", "-o", filepath.Join(dir, "a.folded"), "-p", "1"}, 1,
			"run rewind as root or give it both (setcap cap_perfmon,cap_sys_ptrace=ep rewind)"},
		{"agent-system-wide", []string{"agent", "--unwind-in", "user", "-d", "1", "--out-dir", dir}, 1,
			"rewind agent: perf_event_open on every process (system-wide): permission denied: profiling every process needs root or CAP_PERFMON, or kernel.perf_event_paranoid <= 0 (it is 2)"},
		{"agent-other-user", []string{"agent", "--unwind-in", "user", "-p", "1", "-d", "1", "--out-dir", dir}, 1,
			"run rewind as root or give it both (setcap cap_perfmon,cap_sys_ptrace=ep rewind)"},
		{"record-own", []string{"record", "-o", filepath.Join(dir, "b.folded"), "--", "true"}, 0,
			"kernel frames are not recorded: recording kernel frames needs root or CAP_PERFMON, or kernel.perf_event_paranoid <= 1 (it is 2)"},
		{"dump-goroutines-other-user", []string{"dump", "--goroutines", "1"}, 1, "run rewind as root or give it CAP_SYS_PTRACE"},
	}
	const python = "/usr/bin/python3.11"
	if _, err := os.Stat(python); err == nil {
		cases = append(cases, struct {
			name string
			args []string
			code int
			want string
		}{"record-python", []string{"record", "-F", "199", "-o", filepath.Join(dir, "py.folded"), "--", python, spin, "1"}, 0,
			"  python     frames read after each sample"})
	} else {
		t.Logf("%s is not installed: the Python case is left out", python)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, code := asNobody(c.args...)
			if code != c.code {
				t.Errorf("exit %d, want %d:\n%s", code, c.code, out)
			}
			n := 0
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, c.want) {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%q in %d lines, want 1:\n%s", c.want, n, out)
			}
			if c.name == "record-python" {
				if strings.Contains(out, "no Python frames") {
					t.Errorf("a recording of a Python program of its own has no Python frames:\n%s", out)
				}
				if b, err := os.ReadFile(filepath.Join(dir, "py.folded")); err != nil || !strings.Contains(string(b), "_PyEval_EvalFrameDefault;<module>;leaf ") {
					t.Errorf("no _PyEval_EvalFrameDefault;<module>;leaf in the profile (%v):\n%s", err, b)
				}
			}
			checkLines(t, out)
		})
	}
}
