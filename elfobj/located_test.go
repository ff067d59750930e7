package elfobj

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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

// TestOpenSpecialFiles: paths named by a core, a perf.data MMAP record or
// /proc maps may name a FIFO or a device: Open refuses them at once
// without blocking or opening the device.
func TestOpenSpecialFiles(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, p := range []string{fifo, "/dev/zero", "/dev/tty"} {
			if _, err := Open(p); err == nil || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("Open(%s) = %v", p, err)
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Open blocked")
	}
}
