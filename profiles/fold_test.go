package profiles

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/perftest"
	"github.com/rewindstack/rewind/perfevent"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/unwind"
)

// TestFoldSameOutput builds the example's perf.data file (--call-graph
// dwarf of a static program) twice, one Stack per sample and folded
// (Options.Fold), and writes every output format of both: they are the
// same, byte for byte, and so are the sample counts and the fidelity
// table, while the folded profile keeps fewer stacks.
func TestFoldSameOutput(t *testing.T) {
	sameFolded(t, filepath.Join("testdata", "spin", "perf.data"), regs.AMD64)
}

// TestFoldSameOutputPerf is TestFoldSameOutput for perf's recordings
// of a C program with -g and with --call-graph dwarf, kernel frames
// included.
func TestFoldSameOutputPerf(t *testing.T) {
	perf := perftest.RequirePerf(t)
	exe := perftest.BuildCPU(t, "-fomit-frame-pointer")
	dir := t.TempDir()
	for i, cg := range []string{"-g", "--call-graph=dwarf,4096"} {
		data := filepath.Join(dir, "perf"+strconv.Itoa(i)+".data")
		if out, err := exec.Command(perf, "record", "-q", "-e", "cpu-clock", "-F", "999", cg, "-o", data, "--", exe, "2", "2").CombinedOutput(); err != nil {
			t.Skipf("perf record cannot run here: %v\n%s", err, out)
		}
		sameFolded(t, data, perfevent.Arch())
	}
}

// sameFolded builds path folded and not, and compares their outputs.
func sameFolded(t *testing.T, path string, arch regs.Arch) {
	build := func(fold bool) *Profile {
		pd, err := ReadPerfData(path, arch, ReadOptions{Warn: func(s string) { t.Log(s) }})
		if err != nil {
			t.Fatal(err)
		}
		defer pd.Close()
		return Build(pd.Collector, Options{Methods: []Method{{Name: "auto", Unwinder: unwind.NewAuto()}, {Name: "fp", Unwinder: unwind.NewFP()}}, Fold: fold})
	}
	each, folded := build(false), build(true)
	if folded.Samples() != int64(len(each.Stacks)) || each.Samples() != int64(len(each.Stacks)) {
		t.Errorf("%s: %d samples folded into %d stacks, %d unfolded", path, folded.Samples(), len(folded.Stacks), len(each.Stacks))
	}
	if len(folded.Stacks) >= len(each.Stacks) {
		t.Errorf("%s: %d stacks folded, as many as the %d samples", path, len(folded.Stacks), len(each.Stacks))
	}
	for _, f := range formats {
		var a, b bytes.Buffer
		if err := f.write(&a, each, WriteOptions{PeriodNS: 1001001, Title: "t"}); err != nil {
			t.Fatal(err)
		}
		if err := f.write(&b, folded, WriteOptions{PeriodNS: 1001001, Title: "t"}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Errorf("%s: the %s output differs folded (%d bytes, unfolded %d)", path, f.ext, b.Len(), a.Len())
		}
	}
	var a, b bytes.Buffer
	each.WriteFidelity(&a)
	folded.WriteFidelity(&b)
	if a.String() != b.String() {
		t.Errorf("%s: the fidelity table differs folded:\n%s\nunfolded:\n%s", path, &b, &a)
	}
	t.Logf("%s: %d samples, %d stacks folded", path, len(each.Stacks), len(folded.Stacks))
}
