package main

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/testutil/perftest"
)

var (
	reportBenchSeconds = flag.String("report-seconds", "4", "seconds BenchmarkReportVsPerfScript records the fixture for")
	reportBenchThreads = flag.String("report-threads", "1", "worker threads of the fixture besides main (1: two busy threads)")
	reportBenchData    = flag.String("report-data", "", "perf.data file for BenchmarkReportVsPerfScript instead of a new recording")
)

// median returns the median of xs (sorted in place).
func median(xs []float64) float64 {
	sort.Float64s(xs)
	n := len(xs)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// BenchmarkReportVsPerfScript times the rewind binary's "report" and perf
// script on the same perf.data (the fixture recorded with perf record -F
// 999 --call-graph dwarf: two busy threads for 4 s), each a fresh process.
// Every iteration runs perf script and each rewind variant once, in turn:
//   - default: "rewind report perf.data", what users type (fidelity table
//     on, an HTML flame graph rewind-TIME.html written in the current
//     directory);
//   - folded, pprof: the same with -o x.folded, -o x.pb.gz;
//   - nofid: -q --fidelity=false -o x.folded, the stacks alone.
//
// It reports each one's median wall time, perf script's, and the median
// over iterations of each pair's ratio (perf script / rewind, "x-" metrics:
// how many times faster rewind is). Both print every sample's frames with
// inlined calls. Run with -benchtime 21x or so: medians want several pairs.
func BenchmarkReportVsPerfScript(b *testing.B) {
	perf := perftest.RequirePerf(b)
	dir := b.TempDir()
	rewind := filepath.Join(dir, "rewind")
	if out, err := exec.Command("go", "build", "-o", rewind, ".").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	data := *reportBenchData
	if data == "" {
		exe := perftest.BuildCPU(b, "-fomit-frame-pointer")
		data = filepath.Join(dir, "perf.data")
		if out, err := exec.Command(perf, "record", "-q", "-e", "cpu-clock", "-F", "999", "--call-graph", "dwarf",
			"-o", data, "--", exe, *reportBenchSeconds, *reportBenchThreads).CombinedOutput(); err != nil {
			b.Skipf("perf record cannot run here: %v\n%s", err, out)
		}
	}
	if st, err := os.Stat(data); err == nil {
		b.Logf("%s: %.1f MB", data, float64(st.Size())/1e6)
	}
	variants := []struct {
		name string
		args []string
	}{
		{"default", []string{"report", data}},
		{"folded", []string{"report", "-o", filepath.Join(dir, "x.folded"), data}},
		{"pprof", []string{"report", "-o", filepath.Join(dir, "x.pb.gz"), data}},
		{"nofid", []string{"report", "-q", "--fidelity=false", "-o", filepath.Join(dir, "y.folded"), data}},
	}
	run := func(name string, args ...string) float64 {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir // the default output is written here
		start := time.Now()
		out, err := cmd.CombinedOutput()
		d := time.Since(start)
		if err != nil {
			b.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return d.Seconds() * 1e3
	}
	show := exec.Command(rewind, variants[0].args...)
	show.Dir = dir
	if out, err := show.CombinedOutput(); err == nil {
		b.Logf("rewind report prints:\n%s", out)
	}
	perfMS := []float64{}
	ms := make([][]float64, len(variants))
	ratio := make([][]float64, len(variants))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// perf script first, then the variants; the order of the pair
		// members alternates so neither always runs on a warmer machine.
		p := 0.0
		if i%2 == 0 {
			p = run(perf, "script", "-i", data)
		}
		for v := range variants {
			ms[v] = append(ms[v], run(rewind, variants[v].args...))
		}
		if i%2 == 1 {
			p = run(perf, "script", "-i", data)
		}
		perfMS = append(perfMS, p)
		for v := range variants {
			ratio[v] = append(ratio[v], p/ms[v][i])
		}
	}
	b.StopTimer()
	b.ReportMetric(median(perfMS), "perf-script-ms")
	for v, vr := range variants {
		b.ReportMetric(median(ms[v]), vr.name+"-ms")
		b.ReportMetric(median(ratio[v]), "x-"+vr.name)
	}
}
