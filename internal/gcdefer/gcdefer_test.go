package gcdefer

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// TestRestoredAfterFirstCycle: no collection runs below the limit; the
// first one restores GOGC and the memory limit.
func TestRestoredAfterFirstCycle(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.NumGC
	Until(64 << 20)
	var keep [][]byte
	for i := 0; i < 8; i++ { // 8 MB: twice the default first goal
		keep = append(keep, make([]byte, 1<<20))
	}
	runtime.ReadMemStats(&ms)
	if ms.NumGC != before {
		t.Errorf("%d collections below the limit", ms.NumGC-before)
	}
	if p := debug.SetGCPercent(-1); p != -1 {
		t.Errorf("GOGC %d before the first cycle, want off", p)
	}
	runtime.GC()
	deadline := time.Now().Add(5 * time.Second)
	for {
		p := debug.SetGCPercent(-1) // read it (and set it back below)
		if p == 100 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GOGC still %d after a collection", p)
		}
		time.Sleep(time.Millisecond)
	}
	debug.SetGCPercent(100)
	if l := debug.SetMemoryLimit(-1); l != 1<<63-1 {
		t.Errorf("memory limit %d after the first cycle, want none", l)
	}
	runtime.KeepAlive(keep)
}

// TestCancel: after Cancel, the first collection leaves the settings the
// command made (rewind report's memory limit) as they are, and Cancel
// returned the ones from before Until.
func TestCancel(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	debug.SetGCPercent(100)
	debug.SetMemoryLimit(1<<63 - 1)
	Until(64 << 20)
	p, l := Cancel()
	if p != 100 || l != 1<<63-1 {
		t.Errorf("Cancel returned GOGC %d and limit %d, want 100 and none", p, l)
	}
	debug.SetMemoryLimit(160 << 20)
	defer func() {
		debug.SetGCPercent(100)
		debug.SetMemoryLimit(1<<63 - 1)
	}()
	// The cleanup, were it still armed, runs after the collection, as
	// does this one, queued after it.
	ran := make(chan struct{})
	runtime.AddCleanup(new([64]byte), func(int) { close(ran) }, 0)
	runtime.GC()
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("no cleanup ran after a collection")
	}
	if p := debug.SetGCPercent(-1); p != -1 {
		t.Errorf("GOGC %d after a collection, want still off", p)
	}
	if l := debug.SetMemoryLimit(-1); l != 160<<20 {
		t.Errorf("memory limit %d after a collection, want 160 MiB", l)
	}
}
