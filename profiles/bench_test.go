package profiles_test

import (
	"flag"
	"io"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/perftest"
	"github.com/rewindstack/rewind/perfevent"
	"github.com/rewindstack/rewind/profiles"
	"github.com/rewindstack/rewind/symbolize"
)

var benchSeconds = flag.String("bench-seconds", "3", "seconds the benchmarks record the fixture for")

// reportOnce is rewind report's work, cold: read the file, unwind every
// sample with auto, symbolize with inlined calls into a fresh cache (so
// debug information is loaded again, as a new process would) and write the
// folded stacks.
func reportOnce(b *testing.B, data string) int {
	pd, err := profiles.ReadPerfData(data, perfevent.Arch(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer pd.Close()
	p := profiles.Build(pd.Collector, profiles.Options{
		Methods:    methods("auto"),
		Symbolizer: &symbolize.Symbolizer{Inlines: true, Cache: symbolize.NewCache()},
		Kernel:     func() *profiles.Kallsyms { k, _ := profiles.LoadKallsyms(); return k },
	})
	if err := p.WriteFolded(io.Discard); err != nil {
		b.Fatal(err)
	}
	return len(p.Stacks)
}

// BenchmarkReportVsPerfScript records the fixture with perf record
// --call-graph dwarf -F 999 and, in each iteration, produces its stacks
// with rewind (in process, cold caches) and with perf script (default
// output, which includes inlined frames, and --no-inline), reporting the
// wall times and rewind's speedup over each.
func BenchmarkReportVsPerfScript(b *testing.B) {
	perf := perftest.RequirePerf(b)
	exe := perftest.BuildCPU(b, "-fomit-frame-pointer")
	data := filepath.Join(b.TempDir(), "perf.data")
	rec := exec.Command(perf, "record", "-q", "-e", "cpu-clock", "-F", "999", "--call-graph", "dwarf", "-o", data, "--", exe, *benchSeconds, "3")
	if out, err := rec.CombinedOutput(); err != nil {
		b.Skipf("perf record cannot run here: %v\n%s", err, out)
	}
	var tRewind, tPerf, tPerfNoInline time.Duration
	samples := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		samples = reportOnce(b, data)
		tRewind += time.Since(start)

		start = time.Now()
		if err := exec.Command(perf, "script", "-i", data).Run(); err != nil {
			b.Fatal(err)
		}
		tPerf += time.Since(start)

		start = time.Now()
		if err := exec.Command(perf, "script", "--no-inline", "-i", data).Run(); err != nil {
			b.Fatal(err)
		}
		tPerfNoInline += time.Since(start)
	}
	n := float64(b.N)
	b.ReportMetric(float64(samples), "samples")
	b.ReportMetric(tRewind.Seconds()*1e3/n, "rewind-ms")
	b.ReportMetric(tPerf.Seconds()*1e3/n, "perf-script-ms")
	b.ReportMetric(tPerfNoInline.Seconds()*1e3/n, "perf-script-noinline-ms")
	b.ReportMetric(tPerf.Seconds()/tRewind.Seconds(), "x-faster-than-perf-script")
	b.ReportMetric(tPerfNoInline.Seconds()/tRewind.Seconds(), "x-faster-than-noinline")
}
