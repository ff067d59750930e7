package bpfunwind

import (
	"testing"
	"time"
)

// TestQuietAfterUnchanged counts a thread blocking 1,000 times a second
// in anonymous executable memory (testdata/anoncode.c), where every walk
// meets a PC outside the process's files and may ask for the process to
// be described again. Found unchanged, it is asked about ever less often
// (20 ms, 40 ms, ... up to maxQuiet), not every 10 ms: a few answers in
// three seconds, not hundreds.
func TestQuietAfterUnchanged(t *testing.T) {
	pid, _ := startC(t, "anoncode")
	u := loadOffCPU(t, pid)
	var blocked uint64
	before := u.Work().Unchanged
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		time.Sleep(500 * time.Millisecond)
		stacks, err := u.Read()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range stacks {
			if s.PID == pid && s.OffCPU {
				blocked += s.Events
			}
		}
	}
	asked := u.Work().Unchanged - before
	t.Logf("%d blocked intervals; the process was found unchanged %d times", blocked, asked)
	if blocked < 100 {
		t.Fatalf("%d blocked intervals in 3 s, want 100 at least", blocked)
	}
	if asked < 1 || asked > 20 {
		t.Errorf("found unchanged %d times in 3 s, want 1 to 20", asked)
	}
}
