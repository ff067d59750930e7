package clitest

import (
	"os"
	"os/exec"
	"path/filepath"
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

// TestRecordDirRemovedSavesInTemp: the -o file's directory is removed
// while record runs (by the command itself, so it is surely gone before
// the write): record fails, saves the profile in the temporary directory
// and says where, instead of losing it (issue 38 item 6).
func TestRecordDirRemovedSavesInTemp(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("--unwind-in kernel needs root (BPF); run as root")
	}
	for _, mode := range []string{"user", "kernel"} {
		gone := filepath.Join(t.TempDir(), "gone")
		if err := os.Mkdir(gone, 0o755); err != nil {
			t.Fatal(err)
		}
		tmp := t.TempDir()
		cmd := exec.Command(rewindBin, "record", "-q", "--unwind-in", mode, "-o", filepath.Join(gone, "out.folded"), "--",
			"sh", "-c", `rm -r "$0"; i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done`, gone)
		cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
		out, err := cmd.CombinedOutput()
		want := "the profile was saved as " + tmp + "/rewind-saved-"
		if err == nil || !strings.Contains(string(out), want) {
			t.Fatalf("%s: record into a removed directory: %v, want a failure saying %q\n%s", mode, err, want, out)
		}
		es, _ := os.ReadDir(tmp)
		if len(es) != 1 || !strings.HasSuffix(es[0].Name(), ".folded") {
			t.Fatalf("%s: files in the temporary directory: %v, want the saved profile", mode, es)
		}
		if b, _ := os.ReadFile(filepath.Join(tmp, es[0].Name())); !strings.Contains(string(b), "sh") {
			t.Errorf("%s: %s does not hold the profile: %q", mode, es[0].Name(), b)
		}
	}
}
