package profiles

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/perftest"
	"github.com/rewindstack/rewind/perfevent"
	"github.com/rewindstack/rewind/unwind"
)

// TestStreamedParallelSameAsSequential reads a perf record --call-graph
// dwarf file (not compressed) twice: as rewind report reads a large one,
// its samples unwound while it is read, a few hundred at a time, walked
// on every core, and the part of the file consumed released (read again
// from the page cache if anything looked at it); and all at once at the
// end, each sample walked after the other in the calling goroutine. The
// profiles must be the same: every stack (thread, time, value, frames
// with their functions, files and lines), location and fidelity line.
func TestStreamedParallelSameAsSequential(t *testing.T) {
	perf := perftest.RequirePerf(t)
	exe := perftest.BuildCPU(t, "-fomit-frame-pointer")
	data := filepath.Join(t.TempDir(), "perf.data")
	if out, err := exec.Command(perf, "record", "-q", "-e", "cpu-clock", "-F", "999", "--call-graph", "dwarf,8192",
		"-o", data, "--", exe, "-w", "600", "3").CombinedOutput(); err != nil {
		t.Skipf("perf record cannot run here: %v\n%s", err, out)
	}
	opt := func() Options {
		var ms []Method
		for _, n := range []string{"auto", "dwarf", "sframe", "fp"} {
			u, err := unwind.ByName(n)
			if err != nil {
				t.Fatal(err)
			}
			ms = append(ms, Method{Name: n, Unwinder: u})
		}
		return Options{Methods: ms, Fold: true}
	}
	build := func(streamed bool) (*Profile, int) {
		defer func(m int64, s, h int, w bool) {
			streamMin, pendingSoft, pendingHard, walkInCaller = m, s, h, w
		}(streamMin, pendingSoft, pendingHard, walkInCaller)
		var mk func(*Collector) *Builder
		if streamed {
			streamMin, pendingSoft, pendingHard = 0, 1<<20, 2<<20
			mk = func(c *Collector) *Builder { return NewBuilder(c, opt()) }
		} else {
			walkInCaller = true
		}
		pd, err := ReadPerfData(data, perfevent.Arch(), ReadOptions{Builder: mk})
		if err != nil {
			t.Fatal(err)
		}
		defer pd.Close()
		b, early := pd.Builder, 0
		if b != nil {
			early = int(b.prof.Samples())
		} else {
			b = NewBuilder(pd.Collector, opt())
		}
		b.Add(pd.Collector.Samples())
		return b.Profile(), early
	}
	seq, _ := build(false)
	par, early := build(true)
	if seq.Samples() < 500 {
		t.Fatalf("only %d samples", seq.Samples())
	}
	if early == 0 || int64(early) == par.Samples() {
		t.Errorf("%d of %d samples unwound while the file was read, want some", early, par.Samples())
	}
	if a, b := describe(seq), describe(par); a != b {
		t.Errorf("profiles differ:\n%s\nvs (streamed, parallel)\n%s", a, b)
	}
	var fs, fp bytes.Buffer
	seq.WriteFidelity(&fs)
	par.WriteFidelity(&fp)
	if fs.String() != fp.String() {
		t.Errorf("fidelity differs:\n%s\nvs (streamed, parallel)\n%s", fs.String(), fp.String())
	}
	if len(seq.Locations) != len(par.Locations) {
		t.Errorf("%d locations, %d streamed", len(seq.Locations), len(par.Locations))
	}
	t.Logf("%d samples, %d stacks, %d unwound while the file was read\n%s", seq.Samples(), len(seq.Stacks), early, fs.String())
}

// describe prints every stack of p with its samples and frames, and the
// functions, files and lines of every frame.
func describe(p *Profile) string {
	var b strings.Builder
	for _, s := range p.Stacks {
		fmt.Fprintf(&b, "%d/%d %s t=%d v=%d n=%d %v %v:", s.PID, s.TID, s.Comm, s.Time, s.Value, s.Count, s.Complete, s.End)
		for _, l := range s.Locations {
			fmt.Fprintf(&b, " %#x", l.Addr)
			for _, ln := range l.Lines {
				fmt.Fprintf(&b, " %s@%s:%d", ln.Function, ln.File, ln.Line)
			}
			b.WriteByte(';')
		}
		b.WriteByte('\n')
	}
	return b.String()
}
