package profiles_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/perftest"
	"github.com/rewindstack/rewind/perfevent"
	"github.com/rewindstack/rewind/profiles"
	"github.com/rewindstack/rewind/symbolize"
)

// glibcVariants are GLIBC_TUNABLES settings that make glibc's ifunc
// resolvers pick other string-function variants than this CPU's default
// (each of which may name one function twice: __memmove_avx_unaligned_erms
// and __memcpy_avx_unaligned_erms), so that name comparisons with perf
// cover every variant whichever CPU the tests run on. A CPU without a
// feature named here gets a lesser variant, also worth checking.
var glibcVariants = []struct{ name, tunables string }{
	{"default", ""},
	{"avx2", "glibc.cpu.hwcaps=-AVX512F,-AVX512VL"},
	{"evex", "glibc.cpu.hwcaps=Prefer_No_AVX512"},
	{"sse", "glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX2,-AVX_Fast_Unaligned_Load"},
}

// TestNoCallGraph reads a perf.data recorded without call graphs: every
// user sample is a one-frame stack of its IP, named as perf script names
// it, with each of glibc's string-function variants.
func TestNoCallGraph(t *testing.T) {
	perf := perftest.RequirePerf(t)
	exe := perftest.BuildCPU(t, "-fomit-frame-pointer")
	for _, v := range glibcVariants {
		t.Run(v.name, func(t *testing.T) {
			env := os.Environ()
			if v.tunables != "" {
				env = append(env, "GLIBC_TUNABLES="+v.tunables)
			}
			noCallGraph(t, perf, exe, env)
		})
	}
}

// noCallGraph records exe without call graphs in environment env and
// compares every user sample's one frame with perf script's name.
func noCallGraph(t *testing.T, perf, exe string, env []string) {
	data := filepath.Join(t.TempDir(), "n.data")
	rec := exec.Command(perf, "record", "-q", "-e", "cpu-clock", "-F", "999", "-o", data, "--", exe, "1", "1")
	rec.Env = env
	if out, err := rec.CombinedOutput(); err != nil {
		t.Skipf("perf record cannot run here: %v\n%s", err, out)
	}
	out, err := exec.Command(perf, "script", "-i", data, "-F", "tid,time,ip,sym").Output()
	if err != nil {
		t.Fatalf("perf script: %v", err)
	}
	want := map[string]string{}
	libc := map[string]int{} // perf's names of the fixture's string functions
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || strings.HasPrefix(f[2], "ffff") {
			continue // kernel samples are not the point here
		}
		want[f[0]+" "+strings.TrimSuffix(f[1], ":")] = f[3]
		if strings.HasPrefix(f[3], "__mem") {
			libc[f[3]]++
		}
	}
	t.Logf("samples in libc's memory functions, as perf names them: %v", libc)
	if len(want) < 100 {
		t.Fatalf("perf script shows only %d user samples", len(want))
	}
	pd, err := profiles.ReadPerfData(data, perfevent.Arch(), profiles.ReadOptions{Warn: func(s string) { t.Log(s) }})
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
		} else if strings.HasPrefix(w, "__mem") {
			// An alias chosen unlike perf is wrong every time, not noise.
			t.Errorf("%s: perf script names the sample %s, rewind %s", key, w, s.Locations[0].Name())
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
