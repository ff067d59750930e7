package profiles_test

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/perftest"
	"github.com/rewindstack/rewind/perfevent"
	"github.com/rewindstack/rewind/profiles"
	"github.com/rewindstack/rewind/symbolize"
)

// TestNoCallGraph reads a perf.data recorded without call graphs: every
// user sample is a one-frame stack of its IP, named as perf script names
// it.
func TestNoCallGraph(t *testing.T) {
	perf := perftest.RequirePerf(t)
	exe := perftest.BuildCPU(t, "-fomit-frame-pointer")
	data := filepath.Join(t.TempDir(), "n.data")
	if out, err := exec.Command(perf, "record", "-q", "-e", "cpu-clock", "-F", "999", "-o", data, "--", exe, "1", "1").CombinedOutput(); err != nil {
		t.Skipf("perf record cannot run here: %v\n%s", err, out)
	}
	out, err := exec.Command(perf, "script", "-i", data, "-F", "tid,time,ip,sym").Output()
	if err != nil {
		t.Fatalf("perf script: %v", err)
	}
	want := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || strings.HasPrefix(f[2], "ffff") {
			continue // kernel samples are not the point here
		}
		want[f[0]+" "+strings.TrimSuffix(f[1], ":")] = f[3]
	}
	if len(want) < 100 {
		t.Fatalf("perf script shows only %d user samples", len(want))
	}
	pd, err := profiles.ReadPerfData(data, perfevent.Arch(), func(s string) { t.Log(s) })
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Close()
	p := profiles.Build(pd.Collector, profiles.Options{Methods: methods("auto"), Symbolizer: &symbolize.Symbolizer{}})
	match, total := 0, 0
	for i := range p.Stacks {
		s := &p.Stacks[i]
		key := fmt.Sprintf("%d %d.%06d", s.TID, s.Time/1e9, s.Time%1e9/1e3)
		w, ok := want[key]
		if !ok {
			continue
		}
		total++
		if len(s.Locations) == 1 && s.Locations[0].Name() == w {
			match++
		} else if total-match <= 5 {
			var got []string
			for _, l := range s.Locations {
				got = append(got, l.Name())
			}
			t.Logf("%s: perf script %s, rewind %v", key, w, got)
		}
	}
	t.Logf("%d of %d user samples match perf script (%d in perf script)", match, total, len(want))
	if total < len(want)*99/100 || match < total*99/100 {
		t.Errorf("%d of %d samples match; perf script has %d", match, total, len(want))
	}
}
