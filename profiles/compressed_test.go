package profiles

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/perftest"
	"github.com/rewindstack/rewind/perfevent"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/unwind"
)

// TestCompressedWhileReading reads a file of perf record -z --call-graph
// dwarf twice: unwinding its samples while it is read, a few at a time
// (those before the last round perf finished, or all once too many are
// pending), and all of them at the end. The stacks are the same: no
// sample was unwound before the mappings it needs were read.
func TestCompressedWhileReading(t *testing.T) {
	perf := perftest.RequirePerf(t)
	exe := perftest.BuildCPU(t, "-fomit-frame-pointer")
	data := filepath.Join(t.TempDir(), "z.data")
	if out, err := exec.Command(perf, "record", "-q", "-z", "-e", "cpu-clock", "-F", "999", "--call-graph", "dwarf,4096", "-o", data, "--", exe, "2", "2").CombinedOutput(); err != nil {
		t.Skipf("perf record cannot run here: %v\n%s", err, out)
	}
	stacks := func(soft, hard int) ([]string, int) {
		defer func(s, h int) { pendingSoft, pendingHard = s, h }(pendingSoft, pendingHard)
		pendingSoft, pendingHard = soft, hard
		mk := func(c *Collector) *Builder {
			return NewBuilder(c, Options{Methods: []Method{{Name: "auto", Unwinder: unwind.NewAuto()}}, Symbolizer: &symbolize.Symbolizer{}})
		}
		batches := 0
		pd, err := ReadPerfData(data, perfevent.Arch(), ReadOptions{Builder: mk})
		if err != nil {
			t.Fatal(err)
		}
		defer pd.Close()
		b := pd.Builder
		if b != nil {
			batches = len(b.prof.Stacks)
		} else {
			b = mk(pd.Collector)
		}
		b.Add(pd.Collector.Samples())
		var out []string
		for _, s := range b.Profile().Stacks {
			var names []string
			for _, l := range s.Locations {
				names = append(names, l.Name())
			}
			out = append(out, fmt.Sprintf("%d %d %s", s.TID, s.Time, strings.Join(names, ";")))
		}
		slices.Sort(out)
		return out, batches
	}
	all, early := stacks(1<<40, 1<<40)
	if early != 0 {
		t.Fatalf("%d samples unwound while reading with no limit", early)
	}
	// A few stack copies at a time.
	some, early := stacks(16<<10, 1<<40)
	if early == 0 || early == len(all) {
		t.Errorf("%d of %d samples unwound before the end of the file, want some", early, len(all))
	}
	if !slices.Equal(all, some) {
		t.Errorf("the stacks unwound while reading differ from the others (%d and %d)", len(some), len(all))
	}
	t.Logf("%d samples, %d unwound while the file was read", len(all), early)
}
