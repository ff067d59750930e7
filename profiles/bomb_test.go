package profiles

import (
	"errors"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/perfbomb"
	"github.com/rewindstack/rewind/perfdata"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/unwind"
)

// TestDecompressionBomb reads a perf.data file of less than 1 MB whose
// compressed records expand to 1 GiB of --call-graph dwarf samples, and
// one of -g samples, with the builder the reader unwinds into as it goes:
// the samples' stack copies and records do not pile up (what the heap
// holds when the file is read is the pending samples, at most
// pendingHard, and the unwound stacks, folded: the samples' one stack),
// every sample up to the limit is in the profile, and the error says
// where the limit was reached.
func TestDecompressionBomb(t *testing.T) {
	for _, kind := range []perfbomb.Kind{perfbomb.Dwarf, perfbomb.Tiny} {
		path := filepath.Join(t.TempDir(), "bomb.data")
		res, err := perfbomb.Write(path, perfbomb.Options{Kind: kind, Expand: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		// What the heap held before (other tests' caches, in a run
		// with -count above 1) is not the reading's.
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		builds := 0
		opt := ReadOptions{Builder: func(c *Collector) *Builder {
			builds++
			return NewBuilder(c, Options{Methods: []Method{{Name: "auto", Unwinder: unwind.NewAuto()}}, Fold: true})
		}}
		pd, err := ReadPerfData(path, regs.AMD64, opt)
		var fe *perfdata.FormatError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), "expand past") {
			t.Fatalf("kind %d: %v, want the expansion limit's error", kind, err)
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		c := pd.Collector
		if builds != 1 || pd.Builder == nil {
			t.Fatalf("kind %d: %d builders made, %v kept", kind, builds, pd.Builder != nil)
		}
		grown := int64(ms.HeapAlloc) - int64(before.HeapAlloc)
		if c.pending() > pendingHard || grown > int64(pendingHard+48<<20) {
			t.Errorf("kind %d: %d bytes of samples pending, %d bytes more heap in use after reading", kind, c.pending(), grown)
		}
		pd.Builder.Add(c.Samples())
		prof := pd.Builder.Profile()
		pd.Close()
		// The records up to the limit: 128 MiB (the file is less than
		// 1 MiB).
		want := int64(128<<20) / int64(res.RecordSize)
		if prof.Samples() != want || len(prof.Stacks) != 1 {
			t.Errorf("kind %d: %d samples in %d stacks, want %d in one", kind, prof.Samples(), len(prof.Stacks), want)
		}
		t.Logf("kind %d: %d-byte file, %d samples in %d stacks, %d bytes more heap in use after reading: %v", kind, res.Size, prof.Samples(), len(prof.Stacks), grown, err)
	}
}
