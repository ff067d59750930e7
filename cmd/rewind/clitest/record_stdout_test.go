package clitest

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestRecordToStdout: record -o - --format folded writes the profile, and
// only it, to standard output; the command's own output goes to standard
// error, in both unwinding modes (issue 38 item 6).
func TestRecordToStdout(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("--unwind-in kernel needs root (BPF); run as root")
	}
	for _, mode := range []string{"user", "kernel"} {
		cmd := exec.Command(rewindBin, "record", "-q", "--unwind-in", mode, "-o", "-", "--format", "folded", "--",
			"sh", "-c", "echo CMDOUT; i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s", mode, err, stderr.String())
		}
		if strings.Contains(string(out), "CMDOUT") || !strings.Contains(stderr.String(), "CMDOUT") {
			t.Errorf("%s: the command's output went to standard output, mixed with the profile", mode)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		for _, l := range lines {
			// STACK COUNT, the stack's frames joined by ';'.
			i := strings.LastIndexByte(l, ' ')
			if _, err := strconv.Atoi(l[i+1:]); i <= 0 || err != nil {
				t.Errorf("%s: %q is not a folded stack", mode, l)
				break
			}
		}
	}
}
