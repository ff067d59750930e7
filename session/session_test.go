package session_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/testutil/perftest"
	"github.com/rewindstack/rewind/perfevent"
	"github.com/rewindstack/rewind/profiles"
	"github.com/rewindstack/rewind/session"
)

// TestRunUntilCommandExits: a session of a command that exits by itself
// ends when it does, with its samples in the collector.
func TestRunUntilCommandExits(t *testing.T) {
	perftest.RequirePerfEvent(t)
	exe := perftest.BuildCPU(t, "-fno-omit-frame-pointer")
	col := profiles.NewCollector(perfevent.Arch())
	s := &session.Session{Collector: col, Interval: 50 * time.Millisecond}
	if err := s.Start([]string{exe, "0.3", "1"}, perfevent.Options{Freq: 499}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res := s.Run(ctx)
	if res.Why != "command exited" || res.CommandErr != nil || res.ReadErr != nil {
		t.Fatalf("Run: %+v", res)
	}
	if n := len(col.Samples()); res.Samples == 0 || n == 0 {
		t.Errorf("%d samples counted, %d collected", res.Samples, n)
	}
}

// TestRunEndsCommandAndOrphans: when the duration is up, the command the
// session started and what it left running in the background are ended
// and reaped.
func TestRunEndsCommandAndOrphans(t *testing.T) {
	perftest.RequirePerfEvent(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	s := &session.Session{Collector: profiles.NewCollector(perfevent.Arch()), Duration: 300 * time.Millisecond, AdoptOrphans: true}
	script := "sleep 60 >/dev/null 2>&1 & echo $! > " + pidFile + "; exec sleep 60"
	if err := s.Start([]string{"sh", "-c", script}, perfevent.Options{Freq: 99}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res := s.Run(context.Background())
	if res.Why != "duration reached" || res.Interrupted {
		t.Errorf("Run: %+v", res)
	}
	if s.Command().ProcessState == nil {
		t.Errorf("the command was not reaped")
	}
	// The orphan's pid is written before the command execs its sleep;
	// the duration may end before that, and then there is no orphan.
	if b, err := os.ReadFile(pidFile); err == nil {
		if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pid > 0 {
			if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
				t.Errorf("the command's background process %d outlived the session", pid)
			}
		}
	}
}

// TestRunInterrupted: a session whose context is done ends as
// "interrupted"; the command gets no SIGTERM (a terminal's Ctrl-C reached
// it already) but is killed after KillGrace and reaped.
func TestRunInterrupted(t *testing.T) {
	perftest.RequirePerfEvent(t)
	s := &session.Session{Collector: profiles.NewCollector(perfevent.Arch()), KillGrace: 100 * time.Millisecond}
	if err := s.Start([]string{"sleep", "60"}, perfevent.Options{Freq: 99}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := s.Run(ctx)
	if res.Why != "interrupted" || !res.Interrupted {
		t.Errorf("Run: %+v", res)
	}
	ps := s.Command().ProcessState
	if ps == nil || ps.String() != "signal: killed" {
		t.Errorf("the command ended as %v, want killed", ps)
	}
}

// TestAttachNoSuchProcess: attaching to a process that does not exist
// says so.
func TestAttachNoSuchProcess(t *testing.T) {
	s := &session.Session{Collector: profiles.NewCollector(perfevent.Arch())}
	err := s.Attach(1<<30, perfevent.Options{})
	if !errors.Is(err, session.ErrNoProcess) || !strings.Contains(err.Error(), "no such process: 1073741824") {
		t.Errorf("Attach: %v", err)
	}
}
