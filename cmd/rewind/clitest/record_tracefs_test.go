package clitest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/perftest"
	"github.com/rewindstack/rewind/internal/tracefs"
)

// withoutTracefs is a shell script that unmounts every tracefs (and
// debugfs, whose tracing directory mounts tracefs when looked at) of its
// private mount namespace, runs its arguments, and says whether tracefs
// is mounted on /sys/kernel/tracing after them.
const withoutTracefs = `for m in $(awk '$0 ~ / - (tracefs|debugfs) / {print $5}' /proc/self/mountinfo | sort -r); do umount -l "$m" || exit 3; done
if grep -q ' - tracefs ' /proc/self/mountinfo; then echo "tracefs still mounted" >&2; exit 3; fi
"$@"; rc=$?
if awk '$5 == "/sys/kernel/tracing" && $0 ~ / - tracefs /' /proc/self/mountinfo | grep -q .; then echo MOUNTED-AFTER >&2; fi
exit $rc`

// runWithoutTracefs runs rewind with args in a private mount namespace
// without tracefs (see withoutTracefs), prefix (setpriv ...) before it.
func runWithoutTracefs(t *testing.T, prefix []string, args ...string) (stderr string, code int, mounted bool) {
	t.Helper()
	argv := append([]string{"-c", withoutTracefs, "sh"}, prefix...)
	argv = append(append(argv, rewindBin), args...)
	cmd := exec.Command("/bin/sh", argv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS} // (made private by Go)
	cmd.Dir = t.TempDir()
	var e strings.Builder
	cmd.Stderr = &e
	err := cmd.Run()
	code = cmd.ProcessState.ExitCode()
	if err != nil && code < 0 {
		t.Fatalf("%v: %v", argv, err)
	}
	stderr = e.String()
	if code == 3 && strings.Contains(stderr, "umount") || strings.Contains(stderr, "tracefs still mounted") {
		t.Skipf("cannot unmount tracefs in a private mount namespace: %s", stderr)
	}
	mounted = strings.Contains(stderr, "MOUNTED-AFTER")
	stderr = strings.ReplaceAll(stderr, "MOUNTED-AFTER\n", "")
	return stderr, code, mounted
}

// busyLoop is a command that runs on CPU for a few tenths of a second.
var busyLoop = []string{"sh", "-c", "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done"}

// TestRecordMountsTracefs: where tracefs is not mounted (a fresh Debian
// machine's state; here a private mount namespace), record as root mounts
// it on /sys/kernel/tracing as perf does, says so with --stats only, and
// records: in the kernel, its unmapping tracepoints are attached (no
// warning); --off-cpu --unwind-in user opens sched_switch. Where it cannot
// be mounted (no CAP_SYS_ADMIN), one line names tracefs and how to mount
// it.
func TestRecordMountsTracefs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting tracefs (and a private mount namespace) needs root")
	}
	perftest.RequirePerfEvent(t)
	if _, err := tracefs.Root(); err != nil {
		t.Skipf("no tracefs on this machine: %v", err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "p.folded")
	t.Run("kernel", func(t *testing.T) {
		stderr, code, mounted := runWithoutTracefs(t, nil, append([]string{"record", "-q", "--stats", "--unwind-in", "kernel", "-F", "199", "-o", out, "--"}, busyLoop...)...)
		if strings.Contains(stderr, "--unwind-in kernel:") {
			t.Skipf("the BPF unwinder does not load here: %s", stderr)
		}
		if code != 0 || !mounted {
			t.Fatalf("exit %d, tracefs mounted after: %v\n%s", code, mounted, stderr)
		}
		if !strings.Contains(stderr, "rewind: tracefs was not mounted: mounted it on /sys/kernel/tracing\n") {
			t.Errorf("--stats does not say that tracefs was mounted:\n%s", stderr)
		}
		if strings.Contains(stderr, "tracepoint") || strings.Contains(stderr, "unmapping is not followed") {
			t.Errorf("warns about tracepoints although tracefs was mounted:\n%s", stderr)
		}
	})
	t.Run("off-cpu-user", func(t *testing.T) {
		stderr, code, mounted := runWithoutTracefs(t, nil, "record", "-q", "--off-cpu", "--unwind-in", "user", "-o", out, "--", "sleep", "0.2")
		if code != 0 || !mounted {
			t.Fatalf("exit %d, tracefs mounted after: %v\n%s", code, mounted, stderr)
		}
		if strings.Contains(stderr, "tracefs") {
			t.Errorf("without --stats, says something of tracefs:\n%s", stderr)
		}
	})
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Log("setpriv (util-linux) is not installed: the cases without CAP_SYS_ADMIN are left out")
		return
	}
	noAdmin := []string{setpriv, "--bounding-set=-sys_admin", "--inh-caps=-sys_admin", "--"}
	oneLine := func(t *testing.T, stderr string) {
		t.Helper()
		n := 0
		for _, l := range strings.Split(stderr, "\n") {
			if strings.Contains(l, "tracefs") {
				n++
				if !strings.Contains(l, tracefs.MountCommand) {
					t.Errorf("the line naming tracefs does not say how to mount it: %s", l)
				}
			}
		}
		if n != 1 {
			t.Errorf("tracefs named in %d lines, want 1:\n%s", n, stderr)
		}
	}
	t.Run("off-cpu-user-cannot-mount", func(t *testing.T) {
		stderr, code, mounted := runWithoutTracefs(t, noAdmin, "record", "-q", "--off-cpu", "--unwind-in", "user", "-o", out, "--", "true")
		if strings.Contains(stderr, "setpriv:") {
			t.Skipf("setpriv cannot drop CAP_SYS_ADMIN here: %s", stderr)
		}
		if code != 1 || mounted {
			t.Errorf("exit %d (want 1), tracefs mounted after: %v\n%s", code, mounted, stderr)
		}
		oneLine(t, stderr)
	})
	t.Run("kernel-cannot-mount", func(t *testing.T) {
		stderr, code, mounted := runWithoutTracefs(t, noAdmin, append([]string{"record", "-q", "--unwind-in", "kernel", "-F", "199", "-o", out, "--"}, busyLoop...)...)
		if strings.Contains(stderr, "setpriv:") {
			t.Skipf("setpriv cannot drop CAP_SYS_ADMIN here: %s", stderr)
		}
		if strings.Contains(stderr, "--unwind-in kernel:") {
			t.Skipf("the BPF unwinder does not load without CAP_SYS_ADMIN here: %s", stderr)
		}
		if code != 0 || mounted {
			t.Errorf("exit %d, tracefs mounted after: %v\n%s", code, mounted, stderr)
		}
		oneLine(t, stderr)
		if n := strings.Count(stderr, "unmapping is not followed"); n != 1 {
			t.Errorf("the missing tracepoints said in %d lines, want 1:\n%s", n, stderr)
		}
	})
}
