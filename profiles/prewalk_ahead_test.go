package profiles

import (
	"testing"
	"time"

	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/unwind"
)

// TestPrewalkAheadNoDeadlock adds a batch of many chunks the builder
// never waits for one by one (samples without user registers: nothing to
// walk), so that it releases them all at the end while the workers are
// held back prewalkAhead chunks past the first unreleased one.
func TestPrewalkAheadNoDeadlock(t *testing.T) {
	auto, _ := unwind.ByName("auto")
	fp, _ := unwind.ByName("fp")
	b := NewBuilder(NewCollector(regs.AMD64), Options{Methods: []Method{{Name: "auto", Unwinder: auto}, {Name: "fp", Unwinder: fp}}})
	n := (3*prewalkAhead + 1) * prewalkChunk
	samples := make([]*Sample, n)
	for i := range samples {
		samples[i] = &Sample{PID: 1, TID: 1, Period: 1}
	}
	done := make(chan struct{})
	go func() {
		b.Add(samples)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Add did not return: the workers and the builder wait for each other")
	}
	if p := b.Profile(); len(p.Stacks) != n {
		t.Fatalf("%d stacks, want %d", len(p.Stacks), n)
	}
}
