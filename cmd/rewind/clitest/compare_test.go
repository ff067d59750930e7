package clitest

import (
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
)

var pauseRE = regexp.MustCompile(`paused (\d+) us`)

// BenchmarkDumpVsTools runs, side by side in one run, the answers to "what
// is this 17-thread process doing?": rewind dump PID, eu-stack -p (plain,
// and with -s -i for the source lines and inlined frames rewind prints),
// and gdb's thread apply all bt, each as a whole command, on the same
// blocked -O2 process. rewind also reports the target's pause. "rewind"
// runs with its persistent cache warm (a fresh cache directory, filled by
// one untimed run), as every dump after the first one on a machine does;
// "rewind-nocache" reads all debug information again on every run.
//
//	go test ./cmd/rewind -run '^$' -bench DumpVsTools -benchtime 20x
func BenchmarkDumpVsTools(b *testing.B) {
	exe := fixture.Build(b, "threads", fixture.Variants[3])
	p := fixture.Start(b, exe)
	pid := strconv.Itoa(p.PID)
	tools := []struct {
		name string
		argv []string
	}{
		{"rewind", []string{rewindBin, "dump", pid}},
		{"rewind-nocache", []string{rewindBin, "dump", "--no-cache", pid}},
		{"eu-stack", []string{"eu-stack", "-p", pid}},
		// The same information rewind prints by default: source lines and
		// inlined frames.
		{"eu-stack-s-i", []string{"eu-stack", "-s", "-i", "-p", pid}},
		{"gdb", []string{"gdb", "-batch", "-p", pid, "-ex", "thread apply all bt"}},
	}
	b.Setenv("REWIND_CACHE_DIR", b.TempDir())
	if out, err := exec.Command(rewindBin, "dump", pid).CombinedOutput(); err != nil {
		b.Fatalf("warming the cache: %v\n%s", err, out)
	}
	p.WaitBlocked(b)
	for _, tool := range tools {
		if _, err := exec.LookPath(tool.argv[0]); err != nil {
			b.Logf("skip %s: %v", tool.name, err)
			continue
		}
		b.Run(tool.name, func(b *testing.B) {
			var pauses []int
			for i := 0; i < b.N; i++ {
				out, err := exec.Command(tool.argv[0], tool.argv[1:]...).Output()
				if err != nil {
					b.Fatalf("%s: %v", tool.name, err)
				}
				if m := pauseRE.FindSubmatch(out); m != nil {
					n, _ := strconv.Atoi(string(m[1]))
					pauses = append(pauses, n)
				}
				b.StopTimer()
				p.WaitBlocked(b) // a tracer can make blocking calls restart
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/dump")
			if len(pauses) > 0 {
				sort.Ints(pauses)
				b.ReportMetric(float64(pauses[len(pauses)/2]), "pause-us(median)")
				b.ReportMetric(float64(pauses[len(pauses)-1]), "pause-us(max)")
			}
		})
	}
}
