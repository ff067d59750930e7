package elfobj

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTruncatedErrorsLocated cuts a real executable at many lengths:
// every failure is a FormatError naming the file and saying where
// (a header, section or offset) — never a bare "EOF".
func TestTruncatedErrorsLocated(t *testing.T) {
	full, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Skip("no /bin/true")
	}
	dir := t.TempDir()
	failures := 0
	for _, n := range []int{0, 3, 16, 40, 63, 64, 100, 1000, 3000, len(full) / 2, len(full) - 100, len(full) - 1} {
		p := filepath.Join(dir, "t")
		if err := os.WriteFile(p, full[:n], 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := Open(p)
		if err == nil {
			f.Close()
			continue
		}
		failures++
		var fe *FormatError
		if !errors.As(err, &fe) || fe.File != p || fe.Pkg != "elfobj" {
			t.Errorf("cut at %d: %v (%T) is not a FormatError naming the file", n, err, err)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, "+0x") && !strings.Contains(msg, "offset 0x") {
			t.Errorf("cut at %d: %q gives no offset", n, msg)
		}
		if strings.HasSuffix(msg, ": EOF") && !strings.Contains(msg, "entries") {
			t.Errorf("cut at %d: %q", n, msg)
		}
	}
	if failures == 0 {
		t.Fatal("no cut failed")
	}
}
