package flamegraph

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPerfFolded records a shell loop with perf, folds it with perf's own
// stackcollapse script, and checks ParseFolded reads every line and every
// sample (the count `perf script` prints), and that the rendered SVG holds
// that total.
func TestPerfFolded(t *testing.T) {
	if testing.Short() {
		t.Skip("perf test skipped in -short mode")
	}
	if _, err := exec.LookPath("perf"); err != nil {
		t.Skip("perf is not installed (apt-get install -y linux-perf)")
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "perf.data")
	rec := exec.Command("perf", "record", "-F", "999", "-g", "-o", data, "--",
		"sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done")
	if out, err := rec.CombinedOutput(); err != nil {
		t.Skipf("perf record is not permitted here (perf_event_paranoid must be <= 2 for user-space profiling of own processes): %v\n%s", err, out)
	}
	// "perf script report NAME" ignores -i: it reads ./perf.data.
	collapse := exec.Command("perf", "script", "report", "stackcollapse")
	collapse.Dir = dir
	folded, err := collapse.Output()
	if err != nil {
		t.Fatalf("perf script report stackcollapse: %v", err)
	}
	samples, err := ParseFolded(bytes.NewReader(folded))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Count(strings.TrimSpace(string(folded)), "\n") + 1
	if len(samples) != lines {
		t.Errorf("%d samples from %d folded lines", len(samples), lines)
	}
	// perf script with only comm/tid fields prints one line per sample.
	plain, err := exec.Command("perf", "script", "-i", data, "-F", "comm,tid").Output()
	if err != nil {
		t.Fatalf("perf script: %v", err)
	}
	want := int64(strings.Count(string(plain), "\n"))
	var total int64
	for _, s := range samples {
		total += s.Value
		if s.Stack[0] != "sh" {
			t.Errorf("stack %q does not start with the command name", s.Stack)
		}
	}
	if total != want || want == 0 {
		t.Errorf("folded counts sum to %d, perf script printed %d samples", total, want)
	}
	var svg bytes.Buffer
	if err := WriteSVG(&svg, samples, Options{Title: "perf"}); err != nil {
		t.Fatal(err)
	}
	xmlTitles(t, svg.Bytes())
	if !bytes.Contains(svg.Bytes(), []byte(`data-total="`+strconv.FormatInt(want, 10)+`"`)) {
		t.Errorf("SVG total is not %d", want)
	}
	t.Logf("perf: %d samples in %d folded stacks", want, len(samples))
}
