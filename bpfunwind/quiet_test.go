package bpfunwind

import (
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// TestQuietAfterUnchanged counts a thread blocking 1,000 times a second
// in anonymous executable memory (testdata/anoncode.c), where every walk
// meets a PC outside the process's files and may ask for the process to
// be described again. Found unchanged, it is asked about ever less often
// (20 ms, 40 ms, ... up to maxQuiet), not every 10 ms: a few answers in
// three seconds (more where notices queue up on a loaded machine), not
// hundreds.
func TestQuietAfterUnchanged(t *testing.T) {
	pid, _ := startC(t, "anoncode")
	u := loadOffCPU(t, pid)
	var blocked uint64
	before := u.Work().Unchanged
	for _, s := range offCPUStacks(t, u, pid, 3*time.Second) {
		blocked += s.Events
	}
	asked := u.Work().Unchanged - before
	t.Logf("%d blocked intervals; the process was found unchanged %d times", blocked, asked)
	if blocked < 100 {
		t.Fatalf("%d blocked intervals in 3 s, want 100 at least", blocked)
	}
	if asked < 1 || asked > 60 {
		t.Errorf("found unchanged %d times in 3 s, want 1 to 60", asked)
	}
}

// TestSkip loads the unwinder system-wide with a block process out of
// scope (Options.Skip, the agent's --comm): it is never described, so
// none of its walks is finished (they go as far as files loaded for other
// processes take them), and it is asked about again ever less often.
func TestSkip(t *testing.T) {
	pid, _ := startC(t, "block", "-fomit-frame-pointer")
	if os.Geteuid() != 0 {
		t.Skipf("BPF needs root (or CAP_BPF and CAP_PERFMON)")
	}
	var asked atomic.Int64
	u, err := Load(Options{Skip: func(p int) bool {
		if p == pid {
			asked.Add(1)
			return true
		}
		return false
	}})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(func() { u.Close() })
	if err := u.OffCPU(0); err != nil {
		t.Fatal(err)
	}
	var blocked, finished uint64
	for _, s := range offCPUStacks(t, u, pid, 2*time.Second) {
		blocked += s.Events
		if s.End.Complete() {
			finished += s.Events
		}
	}
	t.Logf("%d blocked intervals, %d walks finished; asked %d times", blocked, finished, asked.Load())
	if blocked < 100 || finished != 0 {
		t.Errorf("%d of %d blocked intervals have finished walks, want none of at least 100", finished, blocked)
	}
	if len(u.Maps(pid)) != 0 {
		t.Errorf("the skipped process was described: %d mappings", len(u.Maps(pid)))
	}
	// (Every 10 ms would be 200; notices that queue up while the
	// answers are slow, on a loaded machine, add some.)
	if n := asked.Load(); n < 1 || n > 60 {
		t.Errorf("asked about the skipped process %d times in 2 s, want 1 to 60", n)
	}
}

// offCPUStacks reads pid's off-CPU stacks every half second for d.
func offCPUStacks(t *testing.T, u *Unwinder, pid int, d time.Duration) []Stack {
	t.Helper()
	var out []Stack
	for end := time.Now().Add(d); time.Now().Before(end); {
		time.Sleep(500 * time.Millisecond)
		stacks, err := u.Read()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range stacks {
			if s.PID == pid && s.OffCPU {
				out = append(out, s)
			}
		}
	}
	return out
}
