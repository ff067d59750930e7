package fsafe

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestOpenRefusesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	reg := filepath.Join(dir, "reg")
	if err := os.WriteFile(reg, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(reg, link); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, p := range []string{fifo, "/dev/null", dir} {
			_, _, err := Open(p)
			if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), p) {
				t.Errorf("Open(%s) = %v, want a not-regular error naming it", p, err)
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Open blocked on a FIFO")
	}
	f, fi, err := Open(link)
	if err != nil || fi.Size() != 4 {
		t.Fatalf("Open(link) = %v, %v", fi, err)
	}
	f.Close()
	f, _, err = Open(reg)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	if n, err := f.Read(b); n != 4 || string(b) != "data" {
		t.Fatalf("read %q, %v", b[:n], err)
	}
	f.Close()
}

func TestUmask(t *testing.T) {
	old := unix.Umask(0o027)
	defer unix.Umask(old)
	if got := CreateMode(0o666); got != 0o640 {
		t.Fatalf("CreateMode(0666) under umask 027 = %#o, want 0640", got)
	}
}
