package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/perftest"
)

// BenchmarkReportVsPerfScript times the rewind binary's "report" and perf
// script on the same perf.data (the fixture recorded with perf record
// --call-graph dwarf -F 999 for 5 s), each a fresh process, alternating in
// every iteration, and reports rewind's speedup. Both print every sample's
// frames with inlined calls: rewind as folded stacks, perf script as its
// default text.
func BenchmarkReportVsPerfScript(b *testing.B) {
	perf := perftest.RequirePerf(b)
	exe := perftest.BuildCPU(b, "-fomit-frame-pointer")
	dir := b.TempDir()
	rewind := filepath.Join(dir, "rewind")
	if out, err := exec.Command("go", "build", "-o", rewind, ".").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	data := filepath.Join(dir, "perf.data")
	if out, err := exec.Command(perf, "record", "-q", "-e", "cpu-clock", "-F", "999", "--call-graph", "dwarf",
		"-o", data, "--", exe, "5", "3").CombinedOutput(); err != nil {
		b.Skipf("perf record cannot run here: %v\n%s", err, out)
	}
	folded := filepath.Join(dir, "out.folded")
	var tRewind, tPerf time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		out, err := exec.Command(rewind, "report", "-q", "--fidelity=false", "-o", folded, data).CombinedOutput()
		if err != nil {
			b.Fatalf("rewind report: %v\n%s", err, out)
		}
		tRewind += time.Since(start)
		if i == 0 {
			if m := strings.Fields(string(out)); len(m) > 0 {
				b.Logf("%s", out)
			}
		}
		start = time.Now()
		if err := exec.Command(perf, "script", "-i", data).Run(); err != nil {
			b.Fatal(err)
		}
		tPerf += time.Since(start)
	}
	n := float64(b.N)
	b.ReportMetric(tRewind.Seconds()*1e3/n, "rewind-report-ms")
	b.ReportMetric(tPerf.Seconds()*1e3/n, "perf-script-ms")
	b.ReportMetric(tPerf.Seconds()/tRewind.Seconds(), "x-faster")
}
