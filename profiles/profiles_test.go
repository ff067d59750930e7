package profiles_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/internal/testutil/perftest"
	"github.com/rewindstack/rewind/perfevent"
	"github.com/rewindstack/rewind/profiles"
	"github.com/rewindstack/rewind/session"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/unwind"
)

func methods(names ...string) []profiles.Method {
	var out []profiles.Method
	for _, n := range names {
		u, err := unwind.ByName(n)
		if err != nil {
			panic(err)
		}
		out = append(out, profiles.Method{Name: n, Unwinder: u})
	}
	return out
}

// record runs argv under a recording session and collects its records.
func record(t *testing.T, argv []string, opt perfevent.Options) *profiles.Collector {
	t.Helper()
	col := profiles.NewCollector(perfevent.Arch())
	s := &session.Session{Collector: col, Interval: 50 * time.Millisecond}
	if err := s.Start(argv, opt); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	switch res := s.Run(ctx); {
	case res.Interrupted:
		t.Fatalf("%v did not exit within a minute", argv)
	case res.ReadErr != nil:
		t.Fatal(res.ReadErr)
	case res.CommandErr != nil:
		t.Fatalf("%v: %v", argv, res.CommandErr)
	}
	return col
}

func fidelity(p *profiles.Profile, method string) profiles.Fidelity {
	for _, f := range p.Fidelity {
		if f.Method == method {
			return f
		}
	}
	return profiles.Fidelity{}
}

func folded(p *profiles.Profile) string {
	var b bytes.Buffer
	p.WriteFolded(&b)
	return b.String()
}

// TestLiveFidelity records the -O2 multi-threaded fixture built without
// frame pointers: rewind's auto method must complete >= 99% of the stacks,
// where frame pointers (what perf record -g shows) cannot.
func TestLiveFidelity(t *testing.T) {
	perftest.RequirePerfEvent(t)
	exe := perftest.BuildCPU(t, "-fomit-frame-pointer")
	col := record(t, []string{exe, "1.5", "3"}, perfevent.Options{Freq: 999})
	p := profiles.Build(col, profiles.Options{Methods: methods("auto", "fp"), Kernel: func() *symbolize.Kallsyms { k, _ := symbolize.LoadKallsyms(); return k }})
	var buf bytes.Buffer
	p.WriteFidelity(&buf)
	t.Logf("%d samples, lost %d\n%s", len(p.Stacks), p.Lost, buf.String())
	auto, fp := fidelity(p, "auto"), fidelity(p, "fp")
	if auto.Samples < 100 {
		t.Fatalf("%d samples with user stacks, want >= 100", auto.Samples)
	}
	if auto.Percent() < 99 {
		t.Errorf("auto: %.2f%% complete stacks, want >= 99%%", auto.Percent())
	}
	if fp.Percent() >= auto.Percent() {
		t.Errorf("fp %.2f%% >= auto %.2f%% on a program without frame pointers", fp.Percent(), auto.Percent())
	}
	// The program's structure: every complete stack of the hot function
	// comes through burn from main or from a worker.
	text := folded(p)
	for _, want := range []string{
		";_start;__libc_start_main", ";main;burn;level1;level2;hash_block ",
		";start_thread;worker;burn;level1;level2;hash_block ",
		";sort_block;__GI___qsort_r;", ";cmp_u32 ", // qsort_r is weak: perf names it __GI___qsort_r
	} {
		if !strings.Contains(text, want) {
			t.Errorf("no folded stack contains %q", want)
		}
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, "hash_block ") && !strings.Contains(line, ";burn;level1;level2;hash_block ") {
			t.Errorf("hash_block reached other than through burn;level1;level2: %s", line)
		}
	}
}

// perfScriptSample is one sample as perf script prints it.
type perfScriptSample struct {
	key   string // "tid time"
	funcs []string
	dsos  []string
}

// perfScript runs perf script on data and parses its samples.
func perfScript(t testing.TB, perf, data string) []perfScriptSample {
	cmd := exec.Command(perf, "script", "-i", data, "--no-inline", "-F", "tid,time,ip,sym,dso")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if len(out) == 0 {
		t.Logf("perf script printed nothing; stderr:\n%s", stderr.String())
	}
	if err != nil {
		t.Fatalf("perf script: %v", err)
	}
	var all []perfScriptSample
	var cur *perfScriptSample
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			cur = nil
		case !strings.HasPrefix(line, "\t"): // tids are right-aligned: headers may start with spaces
			f := strings.Fields(strings.TrimSuffix(strings.TrimSpace(line), ":"))
			if len(f) < 2 {
				t.Fatalf("perf script header %q", line)
			}
			all = append(all, perfScriptSample{key: f[0] + " " + strings.TrimSuffix(f[1], ":")})
			cur = &all[len(all)-1]
		case cur != nil:
			// "\t    addr sym (dso)"
			f := strings.TrimSpace(line)
			_, rest, _ := strings.Cut(f, " ")
			dso := ""
			if i := strings.LastIndex(rest, " ("); i >= 0 {
				dso = strings.TrimSuffix(rest[i+2:], ")")
				rest = rest[:i]
			}
			cur.funcs = append(cur.funcs, rest)
			cur.dsos = append(cur.dsos, dso)
		}
	}
	return all
}

// sameFunction reports whether perf's and rewind's names denote the same
// function: equal after dropping symbol versions (rewind drops them, perf
// prints them), where rewind chooses among the names of one address as
// perf does; "[unknown]" and IRELATIVE PLT slots are spelled differently.
func sameFunction(perfName, ours string) bool {
	norm := func(s string) string {
		if i := strings.IndexByte(s, '@'); i > 0 {
			s = s[:i]
		}
		return s
	}
	a, b := norm(perfName), norm(ours)
	if a == b {
		return true
	}
	if a == "[unknown]" && strings.HasPrefix(b, "[unknown]") {
		return true
	}
	return perfName == "@plt" && strings.HasSuffix(ours, "@plt") // perf 6.1 leaves IRELATIVE PLT slots unnamed; rewind names them as objdump does
}

// TestMatchesPerfScript records the fixture with perf record --call-graph
// dwarf, reads the file with rewind and compares every sample's function
// names, frame by frame, with perf script's.
func TestMatchesPerfScript(t *testing.T) {
	perf := perftest.RequirePerf(t)
	exe := perftest.BuildCPU(t, "-fomit-frame-pointer")
	data := filepath.Join(t.TempDir(), "perf.data")
	rec := exec.Command(perf, "record", "-q", "-e", "cpu-clock", "-F", "999", "--call-graph", "dwarf", "-o", data, "--", exe, "1", "3")
	if out, err := rec.CombinedOutput(); err != nil {
		t.Skipf("perf record cannot run here: %v\n%s", err, out)
	}
	want := perfScript(t, perf, data)
	pd, err := profiles.ReadPerfData(data, perfevent.Arch(), profiles.ReadOptions{Warn: func(s string) { t.Log(s) }})
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Close()
	sym := &symbolize.Symbolizer{}
	// As rewind report runs by default: the fidelity methods on a
	// subsample, every method's walks on all cores.
	p := profiles.Build(pd.Collector, profiles.Options{Methods: methods("auto", "dwarf", "sframe", "fp"), Symbolizer: sym,
		Kernel: func() *symbolize.Kallsyms { k, _ := symbolize.LoadKallsyms(); return k }, FidelitySamples: 100})
	got := map[string]*profiles.Stack{}
	for i := range p.Stacks {
		s := &p.Stacks[i]
		key := fmt.Sprintf("%d %d.%06d", s.TID, s.Time/1e9, s.Time%1e9/1e3)
		got[key] = s
	}
	match, shown := 0, 0
	for _, w := range want {
		s := got[w.key]
		ok := s != nil && len(s.Locations) == len(w.funcs)
		for i := 0; ok && i < len(w.funcs); i++ {
			ok = sameFunction(w.funcs[i], s.Locations[i].Name())
		}
		if ok {
			match++
			continue
		}
		if shown < 5 {
			shown++
			var ours []string
			if s != nil {
				for _, l := range s.Locations {
					ours = append(ours, l.Name())
				}
			}
			t.Logf("sample %s differs:\n  perf:   %s\n  rewind: %s", w.key, strings.Join(w.funcs, ";"), strings.Join(ours, ";"))
		}
	}
	pct := 100 * float64(match) / float64(len(want))
	t.Logf("%d of %d samples have perf script's function names (%.2f%%); rewind read %d samples", match, len(want), pct, len(p.Stacks))
	if len(want) < 50 {
		t.Fatalf("perf script printed only %d samples", len(want))
	}
	if len(p.Stacks) != len(want) {
		t.Errorf("rewind read %d samples, perf script printed %d", len(p.Stacks), len(want))
	}
	if pct < 99 {
		t.Errorf("%.2f%% of samples match perf script, want >= 99%%", pct)
	}
}

func TestMain(m *testing.M) { os.Exit(fixture.Main(m)) }

// TestRebuiltBinary records a program with perf, replaces the executable
// with a different build, and reads the file: rewind must notice the
// build-id change and use perf's cached copy, so the stacks stay right.
func TestRebuiltBinary(t *testing.T) {
	perf := perftest.RequirePerf(t)
	dir := t.TempDir()
	exe := filepath.Join(dir, "prog")
	copyFile(t, perftest.BuildCPU(t, "-fomit-frame-pointer"), exe)
	data := filepath.Join(dir, "perf.data")
	if out, err := exec.Command(perf, "record", "-q", "-e", "cpu-clock", "-F", "499", "--call-graph", "dwarf,8192",
		"-o", data, "--", exe, "0.4", "1").CombinedOutput(); err != nil {
		t.Skipf("perf record cannot run here: %v\n%s", err, out)
	}
	copyFile(t, perftest.BuildCPU(t, "-fno-omit-frame-pointer"), exe)
	var warnings []string
	pd, err := profiles.ReadPerfData(data, perfevent.Arch(), profiles.ReadOptions{Warn: func(s string) { warnings = append(warnings, s) }})
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Close()
	p := profiles.Build(pd.Collector, profiles.Options{Methods: methods("auto")})
	if auto := fidelity(p, "auto"); auto.Samples < 10 || auto.Percent() < 99 {
		t.Errorf("after the rebuild: %.2f%% of %d stacks complete", auto.Percent(), auto.Samples)
	}
	if !strings.Contains(strings.Join(warnings, "\n"), "changed since the recording") {
		t.Errorf("no warning about the changed executable: %q", warnings)
	}
	if !strings.Contains(folded(p), ";main;burn;level1;level2;hash_block ") {
		t.Errorf("stacks of the rebuilt program are wrong:\n%s", folded(p))
	}
}

func copyFile(t *testing.T, from, to string) {
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(to)
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestTakeInPieces unwinds a perf.data file in two batches split at a
// time, as a long recording does, and in one: the profiles must be equal.
func TestTakeInPieces(t *testing.T) {
	perf := perftest.RequirePerf(t)
	exe := perftest.BuildCPU(t, "-fomit-frame-pointer")
	data := filepath.Join(t.TempDir(), "perf.data")
	if out, err := exec.Command(perf, "record", "-q", "-e", "cpu-clock", "-F", "499", "--call-graph", "dwarf,8192",
		"-o", data, "--", exe, "0.6", "2").CombinedOutput(); err != nil {
		t.Skipf("perf record cannot run here: %v\n%s", err, out)
	}
	read := func() *profiles.PerfData {
		pd, err := profiles.ReadPerfData(data, perfevent.Arch(), profiles.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pd.Close() })
		return pd
	}
	opt := profiles.Options{Methods: methods("auto", "fp")}
	whole := profiles.Build(read().Collector, opt)

	col := read().Collector
	b := profiles.NewBuilder(col, opt)
	last := col.LastTime()
	mid := last - 300e6
	part := col.Take(mid)
	if len(part) == 0 || len(part) >= len(whole.Stacks) {
		t.Fatalf("first batch of %d samples out of %d", len(part), len(whole.Stacks))
	}
	if col.PendingBytes() <= 0 {
		t.Errorf("no stack bytes pending after the first batch")
	}
	b.Add(part)
	b.Add(col.Samples())
	if col.PendingBytes() != 0 {
		t.Errorf("%d stack bytes pending at the end", col.PendingBytes())
	}
	pieces := b.Profile()
	if folded(pieces) != folded(whole) {
		t.Errorf("profiles differ:\n%s\nvs\n%s", folded(pieces), folded(whole))
	}
	var a, c bytes.Buffer
	whole.WriteFidelity(&a)
	pieces.WriteFidelity(&c)
	if a.String() != c.String() {
		t.Errorf("fidelity differs:\n%s\nvs\n%s", a.String(), c.String())
	}
}

// TestLiveGoProgram records a Go program: its goroutines' stacks must
// reach runtime.goexit (and the scheduler's threads runtime.mstart), with
// every frame of main.work -> main.spin present. A few samples cannot: in
// Go's signal handler (runtime.sigtramp has no unwind information for the
// signal frame) and on g0 stacks entered through runtime.mcall, which does
// not link back to the goroutine's stack; hence 97% (or 2 samples), not
// 99%.
func TestLiveGoProgram(t *testing.T) {
	perftest.RequirePerfEvent(t)
	exe := perftest.BuildGo(t)
	col := record(t, []string{exe, "1"}, perfevent.Options{Freq: 499})
	p := profiles.Build(col, profiles.Options{Methods: methods("auto", "fp")})
	var buf bytes.Buffer
	p.WriteFidelity(&buf)
	t.Logf("%d samples\n%s", len(p.Stacks), buf.String())
	auto := fidelity(p, "auto")
	if incomplete := auto.Samples - auto.Complete; auto.Samples < 30 || incomplete > max(2, auto.Samples*3/100) {
		t.Errorf("auto: %.2f%% of %d stacks complete, want >= 97%% (or 2 incomplete at most)", auto.Percent(), auto.Samples)
	}
	text := folded(p)
	for _, want := range []string{";runtime.goexit;main.main.func1;main.work;main.spin", ";runtime.goexit;runtime.main;main.main;main.work;main.spin"} {
		if !strings.Contains(text, want) {
			t.Errorf("no folded stack contains %q", want)
		}
	}
}

// TestLiveGoScheduler records a Go program whose goroutines allocate, grow
// maps and ping-pong over channels, so that many samples are on g0 below
// runtime.systemstack and runtime.mcall (issue 13 item 5). rewind's walk
// must reach the root in >= 99% of the samples and never in fewer than
// the kernel's frame-pointer walk of the same samples.
func TestLiveGoScheduler(t *testing.T) {
	perftest.RequirePerfEvent(t)
	exe := perftest.BuildGo(t)
	col := record(t, []string{exe, "1.5", "churn"}, perfevent.Options{Freq: 999})
	p := profiles.Build(col, profiles.Options{Methods: methods("auto")})
	var buf bytes.Buffer
	p.WriteFidelity(&buf)
	t.Logf("%d samples\n%s", len(p.Stacks), buf.String())
	auto, kfp := fidelity(p, "auto"), fidelity(p, profiles.KernelFP)
	if auto.Samples < 100 {
		t.Fatalf("only %d samples", auto.Samples)
	}
	if auto.Percent() < 99 {
		logIncomplete(t, p)
		t.Errorf("auto: %.2f%% of %d stacks complete, want >= 99%%", auto.Percent(), auto.Samples)
	}
	if kfp.Samples > 0 && auto.Complete < kfp.Complete {
		logIncomplete(t, p)
		t.Errorf("auto completes %d stacks, the kernel's frame-pointer walk %d", auto.Complete, kfp.Complete)
	}
	// Frames the walk found are in mappings. The sampled PC itself is
	// the sample's: one taken while the shell that starts the program
	// is in execve has the old image's PC and the new image's mappings.
	for i := range p.Stacks {
		s := &p.Stacks[i]
		user := 0
		for _, l := range s.Locations {
			if l.Kernel {
				continue
			}
			if user++; user > 1 && l.Mapping == nil {
				var names []string
				for _, l := range s.Locations {
					names = append(names, fmt.Sprintf("%s@%#x", l.Name(), l.Addr))
				}
				t.Errorf("stack %d has a frame outside every mapping: %#x (end %v): %s", i, l.Addr, s.End, strings.Join(names, " <- "))
				break
			}
		}
	}
}

// logIncomplete logs the most frequent incomplete stacks of a profile.
func logIncomplete(t *testing.T, p *profiles.Profile) {
	counts := map[string]int{}
	for i := range p.Stacks {
		s := &p.Stacks[i]
		if s.Complete || s.KernelOnly {
			continue
		}
		var names []string
		for _, l := range s.Locations {
			if !l.Kernel {
				names = append(names, fmt.Sprintf("%s@%#x", l.Name(), l.Addr))
			}
		}
		counts[s.End.String()+": "+strings.Join(names, " <- ")]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return counts[keys[i]] > counts[keys[j]] })
	for i, k := range keys {
		if i == 12 {
			break
		}
		t.Logf("%4d  %s", counts[k], k)
	}
}

// drain reads rec into col through the recording pump until the program
// exits, and returns its exit error.
func drain(tb testing.TB, rec *perfevent.Recorder, done <-chan error, col *profiles.Collector) error {
	tb.Helper()
	var exitErr error
	p := &session.Pump{Source: rec, Collector: col, Interval: 50 * time.Millisecond, Check: perftest.UntilExit(tb, done, &exitErr)}
	p.Run()
	if p.Err() != nil {
		tb.Fatal(p.Err())
	}
	return exitErr
}
