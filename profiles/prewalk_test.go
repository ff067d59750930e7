package profiles_test

import (
	"bytes"
	"maps"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/perftest"
	"github.com/rewindstack/rewind/perfevent"
	"github.com/rewindstack/rewind/profiles"
	"github.com/rewindstack/rewind/unwind"
)

// recordFixture records the fixture (no frame pointers) with perf record
// --call-graph dwarf and returns the file. Each of its threads+1 threads
// does a fixed amount of work (rounds of it), not work for a time, so
// that a loaded machine still gives as many cpu-clock samples.
func recordFixture(t *testing.T, rounds, threads string) string {
	perf := perftest.RequirePerf(t)
	exe := perftest.BuildCPU(t, "-fomit-frame-pointer")
	data := filepath.Join(t.TempDir(), "perf.data")
	if out, err := exec.Command(perf, "record", "-q", "-e", "cpu-clock", "-F", "999", "--call-graph", "dwarf,8192",
		"-o", data, "--", exe, "-w", rounds, threads).CombinedOutput(); err != nil {
		t.Skipf("perf record cannot run here: %v\n%s", err, out)
	}
	return data
}

func readPerfData(t *testing.T, data string) *profiles.PerfData {
	pd, err := profiles.ReadPerfData(data, perfevent.Arch(), profiles.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pd.Close() })
	return pd
}

func fidelityTable(p *profiles.Profile) string {
	var b bytes.Buffer
	p.WriteFidelity(&b)
	return b.String()
}

// TestParallelSameAsOneByOne builds a profile from a whole file (its
// samples walked on all cores) and one sample at a time (walked in the
// calling goroutine): stacks, locations and fidelity must be the same.
func TestParallelSameAsOneByOne(t *testing.T) {
	data := recordFixture(t, "300", "3")
	opt := profiles.Options{Methods: methods("auto", "dwarf", "sframe", "fp")}
	whole := profiles.Build(readPerfData(t, data).Collector, opt)
	if len(whole.Stacks) < 200 {
		t.Fatalf("only %d samples: too few to be walked in parallel", len(whole.Stacks))
	}
	col := readPerfData(t, data).Collector
	b := profiles.NewBuilder(col, opt)
	for _, s := range col.Samples() {
		b.Add([]*profiles.Sample{s})
	}
	one := b.Profile()
	if folded(one) != folded(whole) {
		t.Errorf("profiles differ:\n%s\nvs\n%s", folded(one), folded(whole))
	}
	if a, c := fidelityTable(whole), fidelityTable(one); a != c {
		t.Errorf("fidelity differs:\n%s\nvs\n%s", a, c)
	}
	if len(one.Locations) != len(whole.Locations) {
		t.Errorf("%d locations one by one, %d in parallel", len(one.Locations), len(whole.Locations))
	}
}

// TestFidelitySubsample bounds the samples the fidelity methods walk: the
// first method's stacks and line must not change, the others must walk
// every k-th sample, and the table must say so.
func TestFidelitySubsample(t *testing.T) {
	data := recordFixture(t, "300", "3")
	all := profiles.Build(readPerfData(t, data).Collector, profiles.Options{Methods: methods("auto", "dwarf", "fp")})
	n := len(all.Stacks)
	if n < 200 {
		t.Fatalf("only %d samples", n)
	}
	limit := n / 4
	sub := profiles.Build(readPerfData(t, data).Collector, profiles.Options{Methods: methods("auto", "dwarf", "fp"), FidelitySamples: limit})
	if folded(sub) != folded(all) {
		t.Errorf("the first method's stacks changed with a fidelity subsample")
	}
	k := (n + limit - 1) / limit
	withRegs := all.Fidelity[0].Samples
	if f := sub.Fidelity[0]; f.Samples != withRegs || f.Every > 1 || f.Complete != all.Fidelity[0].Complete {
		t.Errorf("first method: %+v, want the same as %+v", f, all.Fidelity[0])
	}
	for _, f := range sub.Fidelity[1:] {
		if f.Method == profiles.KernelFP {
			continue
		}
		if f.Every != k || f.Samples != (withRegs+k-1)/k {
			t.Errorf("%s walked %d samples, every %d; want %d, every %d", f.Method, f.Samples, f.Every, (withRegs+k-1)/k, k)
		}
	}
	table := fidelityTable(sub)
	t.Logf("%s", table)
	if !strings.Contains(table, "dwarf, fp: measured on every ") {
		t.Errorf("the table does not say which lines are on a subsample:\n%s", table)
	}
	if strings.Contains(fidelityTable(all), "subsample") {
		t.Errorf("a table of every sample mentions a subsample:\n%s", fidelityTable(all))
	}
}

// walkedCFI and walkedSFrame are the CFI-only and SFrame-only steppers
// under other types, so that the builder does not recognize their
// methods as ones whose walks it makes from the first method's.
type (
	walkedCFI    struct{ unwind.CFITable }
	walkedSFrame struct{ unwind.SFrame }
)

// TestFidelityCopiedWalks checks the "dwarf" and "sframe" lines the
// builder makes from the "auto" walks against ones it walks: they must be
// the same, and copies must have been made.
func TestFidelityCopiedWalks(t *testing.T) {
	data := recordFixture(t, "300", "3")
	ms := methods("auto", "dwarf", "sframe")
	ms = append(ms,
		profiles.Method{Name: "dwarf-walked", Unwinder: &unwind.Unwinder{Steppers: []unwind.Stepper{walkedCFI{}}}},
		profiles.Method{Name: "sframe-walked", Unwinder: &unwind.Unwinder{Steppers: []unwind.Stepper{walkedSFrame{}}}})
	p := profiles.Build(readPerfData(t, data).Collector, profiles.Options{Methods: ms})
	for i := 1; i <= 2; i++ {
		copied, walked := p.Fidelity[i], p.Fidelity[i+2]
		if copied.Copied == 0 || walked.Copied != 0 {
			t.Fatalf("%d %s walks copied, %d of %s; want some, none", copied.Copied, copied.Method, walked.Copied, walked.Method)
		}
		t.Logf("%d of %d %s walks copied", copied.Copied, copied.Samples, copied.Method)
		if copied.Samples != walked.Samples || copied.Complete != walked.Complete || copied.Frames != walked.Frames || !maps.Equal(copied.Ends, walked.Ends) {
			t.Errorf("copied walks %+v, walked %+v", copied, walked)
		}
	}
}
