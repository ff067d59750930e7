package perfevent

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rewindstack/rewind/perfdata"
)

// TestPermissionMessages: for every value of kernel.perf_event_paranoid
// and every kind of target, a refused perf_event_open names the target
// as a user knows it (a process, every process, the cgroup: never
// "thread -1"), the privilege and how to give it, and the sysctl's value
// beside the value needed only when lowering it would help: never a
// value needed that the sysctl already has.
func TestPermissionMessages(t *testing.T) {
	dir := t.TempDir()
	old := paranoidPath
	defer func() { paranoidPath = old }()
	paranoidPath = filepath.Join(dir, "perf_event_paranoid")
	cpu := Attr(Options{Freq: 99, StackSize: 8192})
	cpu.Flags |= perfdata.FlagExcludeKernel
	sw := SwitchAttr(Options{Freq: 99, StackSize: 8192}, 1)
	targets := []struct {
		name string
		attr *perfdata.Attr
		et   eventTarget
		want string // the target as named
		max  int    // the sysctl's largest value that allows it
	}{
		{"process", cpu, eventTarget{pid: os.Getpid(), cpu: -1}, "process " + strconv.Itoa(os.Getpid()), 2},
		{"system", cpu, eventTarget{pid: -1}, "every process (system-wide)", 0},
		{"cgroup", cpu, eventTarget{pid: 3, cgroup: true}, "the cgroup", 0},
		{"switches", sw, eventTarget{pid: os.Getpid(), cpu: -1}, "process " + strconv.Itoa(os.Getpid()), -1},
	}
	need := regexp.MustCompile(`<= (-?\d+) \(it is (-?\d+)\)`)
	for _, p := range []int{-1, 0, 1, 2, 3, 4} {
		os.WriteFile(paranoidPath, []byte(strconv.Itoa(p)+"\n"), 0o644)
		for _, c := range targets {
			msg := openError(unix.EACCES, c.attr, c.et).Error()
			what := c.name + " at paranoid " + strconv.Itoa(p)
			if !strings.Contains(msg, "perf_event_open on "+c.want+": permission denied: ") {
				t.Errorf("%s: does not name the target as %q: %s", what, c.want, msg)
			}
			if strings.Contains(msg, "thread") || strings.Contains(msg, "-1:") {
				t.Errorf("%s: names a thread: %s", what, msg)
			}
			if !strings.Contains(msg, "run rewind as root or give it CAP_PERFMON (setcap cap_perfmon=ep rewind)") {
				t.Errorf("%s: does not say how to get the privilege: %s", what, msg)
			}
			m := need.FindStringSubmatch(msg)
			switch {
			case p <= c.max && c.et.pid >= 0 && !c.et.cgroup && (m != nil || !strings.Contains(msg, "not yours")):
				t.Errorf("%s: the sysctl allows it, the message should say the process is another user's: %s", what, msg)
			case p <= c.max && (c.et.pid < 0 || c.et.cgroup) && (m != nil || !strings.Contains(msg, "which allows it")):
				t.Errorf("%s: the sysctl allows it, the message should say so: %s", what, msg)
			case p > c.max && m == nil:
				t.Errorf("%s: does not state the value needed beside the sysctl's: %s", what, msg)
			case m != nil:
				max, _ := strconv.Atoi(m[1])
				is, _ := strconv.Atoi(m[2])
				if is != p || max >= is || max != c.max {
					t.Errorf("%s: says <= %d (it is %d), want <= %d (it is %d): %s", what, max, is, c.max, p, msg)
				}
				if !strings.Contains(msg, "sysctl kernel.perf_event_paranoid="+m[1]) {
					t.Errorf("%s: does not say how to lower the sysctl: %s", what, msg)
				}
			}
		}
		hint := PermissionHint()
		if m := need.FindStringSubmatch(hint); m == nil || m[1] != "1" || m[2] != strconv.Itoa(p) {
			t.Errorf("kernel frames at paranoid %d: %s", p, hint)
		}
	}
	os.Remove(paranoidPath)
	if msg := openError(unix.EPERM, cpu, eventTarget{pid: -1}).Error(); !strings.Contains(msg, "kernel.perf_event_paranoid <= 0: run rewind as root") {
		t.Errorf("unreadable sysctl: %s", msg)
	}
}
