package profiles_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/perftest"
	"github.com/rewindstack/rewind/perfevent"
	"github.com/rewindstack/rewind/profiles"
	"github.com/rewindstack/rewind/symbolize"
)

// TestSystemWide reads perf record -a files (several events, records perf
// synthesizes with event id 0): every sample perf script shows is read,
// with the command perf names.
func TestSystemWide(t *testing.T) {
	perf := perftest.RequirePerf(t)
	for _, cg := range [][]string{{"-g"}, {"--call-graph", "dwarf,4096"}} {
		data := filepath.Join(t.TempDir(), "s.data")
		args := append([]string{"record", "-q", "-a", "-F", "199"}, cg...)
		args = append(args, "-o", data, "--", "sleep", "0.5")
		if out, err := exec.Command(perf, args...).CombinedOutput(); err != nil {
			t.Skipf("perf record -a cannot run here (needs system-wide perf_event access): %v\n%s", err, out)
		}
		out, err := exec.Command(perf, "script", "-i", data, "-F", "comm,tid,time").Output()
		if err != nil {
			t.Fatalf("perf script: %v", err)
		}
		want := 0
		comms := map[string]bool{}
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) >= 3 {
				want++
				comms[f[0]] = true
			}
		}
		var warns []string
		pd, err := profiles.ReadPerfData(data, perfevent.Arch(), profiles.ReadOptions{Warn: func(s string) { warns = append(warns, s) }})
		if err != nil {
			t.Fatalf("%v: %v", cg, err)
		}
		p := profiles.Build(pd.Collector, profiles.Options{Methods: methods("auto"), Symbolizer: &symbolize.Symbolizer{}})
		pd.Close()
		for _, w := range warns {
			if strings.Contains(w, "unknown event id") || strings.Contains(w, "before it") {
				t.Errorf("%v: %s", cg, w)
			}
		}
		if len(p.Stacks) != want {
			t.Errorf("%v: %d samples, perf script shows %d", cg, len(p.Stacks), want)
		}
		if !comms["sleep"] {
			continue
		}
		found := false
		for i := range p.Stacks {
			found = found || p.Stacks[i].Comm == "sleep"
		}
		if !found {
			t.Errorf("%v: no sample of sleep", cg)
		}
	}
}

// TestSystemWideComm: the folded output names the idle task as perf
// script does ("swapper").
func TestSystemWideComm(t *testing.T) {
	perf := perftest.RequirePerf(t)
	data := filepath.Join(t.TempDir(), "s.data")
	if out, err := exec.Command(perf, "record", "-q", "-a", "-g", "-F", "199", "-o", data, "--", "sleep", "0.5").CombinedOutput(); err != nil {
		t.Skipf("perf record -a cannot run here (needs system-wide perf_event access): %v\n%s", err, out)
	}
	out, err := exec.Command(perf, "script", "-i", data, "-F", "comm").Output()
	if err != nil {
		t.Fatalf("perf script: %v", err)
	}
	want := map[string]int{}
	for _, line := range strings.Split(string(out), "\n") {
		if c := strings.TrimSpace(line); c != "" {
			want[c]++
		}
	}
	pd, err := profiles.ReadPerfData(data, perfevent.Arch(), profiles.ReadOptions{Warn: func(string) {}})
	if err != nil {
		t.Fatal(err)
	}
	p := profiles.Build(pd.Collector, profiles.Options{Methods: methods("auto"), Symbolizer: &symbolize.Symbolizer{}})
	pd.Close()
	got := map[string]int{}
	for i := range p.Stacks {
		got[p.Stacks[i].Comm]++
	}
	roots := map[string]bool{}
	for _, f := range p.Fold(profiles.FoldOptions{}) {
		roots[f.Stack[0]] = true
	}
	for c := range want {
		if !roots[c] {
			t.Errorf("no folded stack starts with %q (perf script's command)", c)
		}
	}
	for c, n := range want {
		if got[c] != n {
			t.Errorf("command %q: %d samples in the folded output, perf script %d (folded roots: %v)", c, got[c], n, got)
		}
	}
}

// TestSeveralEvents: a recording of two events is profiled by the first
// one given (-e), whichever was sampled first, with as many samples as
// perf script shows for it, and says that the other event's samples were
// left out.
func TestSeveralEvents(t *testing.T) {
	perf := perftest.RequirePerf(t)
	data := filepath.Join(t.TempDir(), "e.data")
	prog := perftest.BuildCPU(t, "-fno-omit-frame-pointer")
	// The program faults in its pages before the first clock tick: its
	// first samples are of the second event.
	if out, err := exec.Command(perf, "record", "-q", "-e", "cpu-clock", "-F", "499", "-e", "page-faults/period=1/", "-g", "-o", data, "--", prog, "0.3", "1").CombinedOutput(); err != nil {
		t.Skipf("perf record cannot run here: %v\n%s", err, out)
	}
	out, err := exec.Command(perf, "script", "-i", data, "-F", "event").Output()
	if err != nil {
		t.Fatalf("perf script: %v", err)
	}
	perEvent := map[string]int{}
	first := "cpu-clock"
	for _, line := range strings.Split(string(out), "\n") {
		if e := strings.TrimSuffix(strings.TrimSpace(line), ":"); e != "" {
			perEvent[e]++
		}
	}
	if len(perEvent) < 2 {
		t.Skipf("perf recorded samples of %d events: %v", len(perEvent), perEvent)
	}
	var warns []string
	pd, err := profiles.ReadPerfData(data, perfevent.Arch(), profiles.ReadOptions{Warn: func(s string) { warns = append(warns, s) }})
	if err != nil {
		t.Fatal(err)
	}
	p := profiles.Build(pd.Collector, profiles.Options{Methods: methods("auto"), Symbolizer: &symbolize.Symbolizer{}})
	pd.Close()
	if len(p.Stacks) != perEvent[first] {
		t.Errorf("%d samples, perf script shows %d of %s (%v); warnings %q", len(p.Stacks), perEvent[first], first, perEvent, warns)
	}
	if w := strings.Join(warns, "\n"); !strings.Contains(w, "other events were left out") {
		t.Errorf("no warning about the other event's samples: %q", warns)
	}
}
