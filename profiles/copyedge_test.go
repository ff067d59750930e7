package profiles_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/perftest"
	"github.com/rewindstack/rewind/perfevent"
	"github.com/rewindstack/rewind/profiles"
	"github.com/rewindstack/rewind/symbolize"
)

const deepC = `
volatile long sink;
__attribute__((noinline)) long deep(int n) {
	char pad[64];
	pad[n % 64] = (char)n;
	if (n == 0) { long s = 0; for (long i = 0; i < 400000000; i++) s += i; return s; }
	return deep(n - 1) + pad[(n * 7) % 64];
}
int main(void) { sink = deep(500); return 0; }
`

// TestCopyEdge records a depth-500 recursion with a 4 KB stack copy: most
// walks end at the copy's edge, and the profile says so.
func TestCopyEdge(t *testing.T) {
	perf := perftest.RequirePerf(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "deep.c")
	exe := filepath.Join(dir, "deep")
	if err := os.WriteFile(src, []byte(deepC), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O1", "-g", "-fomit-frame-pointer", "-o", exe, src).CombinedOutput(); err != nil {
		t.Skipf("no C compiler: %v\n%s", err, out)
	}
	data := filepath.Join(dir, "d.data")
	if out, err := exec.Command(perf, "record", "-q", "-e", "cpu-clock", "-F", "499", "--call-graph", "dwarf,4096", "-o", data, "--", exe).CombinedOutput(); err != nil {
		t.Skipf("perf record cannot run here: %v\n%s", err, out)
	}
	pd, err := profiles.ReadPerfData(data, perfevent.Arch(), profiles.ReadOptions{Warn: func(string) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Close()
	p := profiles.Build(pd.Collector, profiles.Options{Methods: methods("auto"), Symbolizer: &symbolize.Symbolizer{}})
	user := len(p.Stacks) - p.KernelOnly
	t.Logf("%d of %d samples at the copy's edge", p.AtCopyEdge, user)
	if user < 20 || p.AtCopyEdge < user*8/10 {
		t.Errorf("%d of %d samples counted at the copy's edge; want most", p.AtCopyEdge, user)
	}
}
