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
