package agent

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"golang.org/x/sys/unix"
)

// scripted fails or succeeds as its script says, one entry a call.
type scripted struct {
	mu     sync.Mutex
	script []error
	calls  int
}

func (s *scripted) Name() string { return "scripted" }

func (s *scripted) Export(context.Context, *Period) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if len(s.script) == 0 {
		return nil
	}
	err := s.script[0]
	s.script = s.script[1:]
	return err
}

// tmpErr is an error like the out-dir's: the file name differs on every
// try.
func tmpErr(name string, errno unix.Errno) error {
	return &fs.PathError{Op: "write", Path: "/var/lib/rewind/.rewind-cpu-" + name + ".tmp", Err: errno}
}

// TestRetryWarningByCause: retries failing for one cause warn once, even
// when each error names another file; another cause warns, and after a
// success the first cause warns again.
func TestRetryWarningByCause(t *testing.T) {
	s := &scripted{script: []error{
		tmpErr("a1", unix.ENOSPC), tmpErr("b2", unix.ENOSPC), tmpErr("c3", unix.EACCES), tmpErr("d4", unix.ENOSPC),
		nil, // the first period is sent
		tmpErr("e5", unix.ENOSPC),
	}}
	var mu sync.Mutex
	var warnings []string
	q := newQueue(s, 4, func(w string) {
		mu.Lock()
		warnings = append(warnings, w)
		mu.Unlock()
	})
	q.minBackoff, q.maxBackoff = time.Millisecond, time.Millisecond
	q.push(testPeriod(TypeCPU))
	q.push(testPeriod(TypeCPU))
	go q.run()
	q.close()
	q.wait(time.Minute)
	sent, _, failures, _ := q.stats()
	if sent != 2 || failures != 5 {
		t.Fatalf("sent %d, failures %d; want 2, 5", sent, failures)
	}
	want := []string{"a1", "c3", "e5"}
	if len(warnings) != len(want) {
		t.Fatalf("%d warnings, want %d (one per cause until a success):\n%s", len(warnings), len(want), strings.Join(warnings, "\n"))
	}
	for i, w := range warnings {
		if !strings.Contains(w, want[i]) || !strings.Contains(w, "retrying") {
			t.Errorf("warning %d: %q, want the try of %s", i, w, want[i])
		}
	}
}

func TestErrCause(t *testing.T) {
	if a, b := errCause(tmpErr("x", unix.ENOSPC)), errCause(tmpErr("y", unix.ENOSPC)); a != b {
		t.Errorf("same cause, other file: %q != %q", a, b)
	}
	if a, b := errCause(tmpErr("x", unix.ENOSPC)), errCause(tmpErr("x", unix.EIO)); a == b {
		t.Errorf("other errno, same cause %q", a)
	}
	if a, b := errCause(errors.New("HTTP 500")), errCause(errors.New("HTTP 503")); a == b {
		t.Errorf("other messages, same cause %q", a)
	}
}

// TestDirFullDisk: the out-dir on a full file system: Export fails with
// ENOSPC naming the file it wanted, leaves no temporary file, and two
// periods' failures have one cause.
func TestDirFullDisk(t *testing.T) {
	dir := fixture.Tmpfs(t, 16<<10)
	fill, err := os.Create(filepath.Join(dir, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = fill.Write(make([]byte, 4096))
	}
	fill.Close()
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("filling %s: %v", dir, err)
	}
	d, err := NewDir(dir, 10, 19)
	if err != nil {
		t.Fatal(err)
	}
	var causes []string
	for seq := 1; seq <= 2; seq++ {
		p := testPeriod(TypeCPU)
		p.Seq = seq
		err := d.Export(context.Background(), p)
		if !errors.Is(err, unix.ENOSPC) || !strings.Contains(err.Error(), "rewind-cpu-") {
			t.Fatalf("Export on a full disk: %v", err)
		}
		causes = append(causes, errCause(err))
	}
	if causes[0] != causes[1] {
		t.Errorf("causes %q", causes)
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Errorf("%d files in the full out-dir, want only the filler", len(es))
	}
}
