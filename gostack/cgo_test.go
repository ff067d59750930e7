package gostack

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCgoCallback builds testdata/cgocallback (a cgo program) and runs it:
// it compares Callers with runtime.Callers in Go code called from C, with C
// frames between Go frames, and in a goroutine after such a callback.
func TestCgoCallback(t *testing.T) {
	out, err := exec.Command("go", "env", "CGO_ENABLED").Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	if strings.TrimSpace(string(out)) != "1" {
		t.Skip("cgo is disabled for this GOOS/GOARCH (cross build)")
	}
	bin := filepath.Join(t.TempDir(), "cgocallback")
	build := exec.Command("go", "build", "-o", bin, "./testdata/cgocallback")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the cgo fixture: %v\n%s", err, out)
	}
	out, err = exec.Command(bin).CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("cgo fixture: %v", err)
	}
	if got := strings.Count(string(out), "frames agree"); got != 5 {
		t.Errorf("%d of 5 checks reported agreement", got)
	}
}
