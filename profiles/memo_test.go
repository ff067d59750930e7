package profiles

import (
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/perftest"
	"github.com/rewindstack/rewind/perfevent"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// TestMemoWalksSameAsFresh records C code without frame pointers (CFI
// only; qsort recursing in libc; also with a copy too short for most
// stacks) and a Go program (stack switches into the scheduler) with perf
// record --call-graph dwarf, and walks every
// sample with every method twice: fresh, and with its thread's memo of
// the previous walk (unwind.Memo), as reports do. The walks must be the
// same, and the memos must have saved steps.
func TestMemoWalksSameAsFresh(t *testing.T) {
	perf := perftest.RequirePerf(t)
	cpu := perftest.BuildCPU(t, "-fomit-frame-pointer")
	progs := []struct {
		name, copy string // copy: the stack bytes copied per sample
		argv       []string
	}{
		{"c", "16384", []string{cpu, "-w", "600", "2"}},
		// Most walks end where a copy of 1 KiB does: reads past it fail,
		// and must fail again for a walk to be reused.
		{"c-short-copy", "1024", []string{cpu, "-w", "600", "2"}},
		{"go", "16384", []string{perftest.BuildGo(t), "1"}},
	}
	for _, p := range progs {
		t.Run(p.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "perf.data")
			args := append([]string{"record", "-q", "-e", "cpu-clock", "-F", "999", "--call-graph", "dwarf," + p.copy, "-o", data, "--"}, p.argv...)
			if out, err := exec.Command(perf, args...).CombinedOutput(); err != nil {
				t.Skipf("perf record cannot run here: %v\n%s", err, out)
			}
			pd, err := ReadPerfData(data, perfevent.Arch(), ReadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer pd.Close()
			c := pd.Collector
			samples := c.Samples()
			for _, meth := range []string{"auto", "dwarf", "fp", "sframe"} {
				u, _ := unwind.ByName(meth)
				var ms memos
				var fresh, memo unwind.Stack
				var snap target.Snapshot
				walks, frames, reused := 0, 0, 0
				for _, s := range samples {
					if !s.HasRegs {
						continue
					}
					r := s.Regs()
					snap.Regions = []target.Region{{Addr: s.sp, Data: s.Stack}}
					space := c.addressSpace(s.space)
					walkSample(u, &fresh, s, &r, &snap, space, nil)
					m := ms.get(s.TID, 0)
					before := m.Reused
					walkSample(u, &memo, s, &r, &snap, space, m)
					if !reflect.DeepEqual(fresh, memo) {
						t.Fatalf("%s, sample of thread %d at %d: with the memo\n%+v\nfresh\n%+v", meth, s.TID, s.Time, memo, fresh)
					}
					walks++
					frames += len(fresh.Frames)
					reused += m.Reused - before
				}
				t.Logf("%s: %d walks, %d frames, %d of them reused", meth, walks, frames, reused)
				if walks < 100 {
					t.Fatalf("only %d samples", walks)
				}
				if (meth == "auto" || meth == "dwarf") && reused < frames/4 {
					t.Errorf("%s: the memos saved %d of %d frames", meth, reused, frames)
				}
			}
		})
	}
}
