package clitest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
)

// TestRecordJITPerfMap records a program running generated code named in
// its perf map: most samples are named from the map exactly, as perf
// report names them, in both modes (the kernel walk goes through the
// anonymous code by its frame pointers).
func TestRecordJITPerfMap(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("running as uid %d: recording is tested as root (CAP_PERFMON or kernel.perf_event_paranoid <= 2 would do)", os.Geteuid())
	}
	exe := fixture.BuildC(t, fixture.JITSource)
	dir := t.TempDir()
	defer fixture.RemovePerfMaps()
	for _, mode := range []string{"user", "kernel"} {
		t.Run(mode, func(t *testing.T) {
			folded := filepath.Join(dir, mode+".folded")
			_, stderr, code := fixture.Run(t, rewindBin, "record", "--unwind-in", mode, "-F", "499", "-o", folded, "--", exe, "spin", "3")
			if code != 0 {
				t.Fatalf("record exited %d:\n%s", code, stderr)
			}
			b, err := os.ReadFile(folded)
			if err != nil {
				t.Fatal(err)
			}
			total, named := 0, 0
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				i := strings.LastIndexByte(l, ' ')
				var n int
				fmt.Sscan(l[i+1:], &n)
				total += n
				if strings.Contains(l, ";"+fixture.JITName) {
					named += n
				}
			}
			if total < 50 || named*10 < total*9 {
				t.Errorf("%d of %d samples named from the perf map, want 90%%:\n%s\n%s", named, total, b, stderr)
			}
		})
	}
}

// nodeSpin spins in jsHot for two seconds, then exits (flushing V8's
// jitdump, which it writes through a large buffer).
const nodeSpin = `function jsHot(n) { let s = 0; for (let i = 0; i < n; i++) s += i % 7; return s; }
const end = Date.now() + 2000;
let t = 0;
while (Date.now() < end) t += jsHot(1e5);
`

// TestRecordJITDumpNode records Node with --perf-prof, which names its
// code in a jitdump (jit-PID.dump in its directory, mapped by the
// process) and no perf map: the JavaScript frames are named from the
// dump, as perf inject --jit names them, with the dump's file:line, and
// their mapping is "[jit]" in pprof.
func TestRecordJITDumpNode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("running as uid %d: recording is tested as root", os.Geteuid())
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skipf("no node: %v", err)
	}
	dir := t.TempDir() // node's jitdump and V8 log die with it
	js := filepath.Join(dir, "spin.js")
	if err := os.WriteFile(js, []byte(nodeSpin), 0o644); err != nil {
		t.Fatal(err)
	}
	folded, pb := filepath.Join(dir, "out.folded"), filepath.Join(dir, "out.pb.gz")
	for _, out := range []string{folded, pb} {
		cmd := exec.Command(rewindBin, "record", "--unwind-in", "user", "-F", "499", "-o", out, "--", node, "--perf-prof", js)
		cmd.Dir = dir
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("record: %v\n%s", err, b)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "jit-*.dump")); len(m) != 2 {
		t.Fatalf("node wrote jitdumps %q, want one per run", m)
	}
	b, err := os.ReadFile(folded)
	if err != nil {
		t.Fatal(err)
	}
	total, named, main := 0, 0, 0
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		i := strings.LastIndexByte(l, ' ')
		var n int
		fmt.Sscan(l[i+1:], &n)
		total += n
		if strings.Contains(l, "Builtins_JSEntry") { // the JavaScript thread's
			main += n
			if strings.Contains(l, ";JS:*jsHot "+js+":1:") || strings.Contains(l, ";JS:* "+js) {
				named += n
			}
		}
	}
	t.Logf("%d of %d samples in JavaScript (%d in all) named from the jitdump", named, main, total)
	if total < 200 || named*10 < main*8 {
		t.Errorf("%d of %d samples in JavaScript (%d in all) named from the jitdump, want 80%%:\n%s", named, main, total, b)
	}
	p, err := os.ReadFile(pb)
	if err != nil {
		t.Fatal(err)
	}
	prof, err := profile.ParseData(p)
	if err != nil {
		t.Fatal(err)
	}
	jit := 0
	for _, l := range prof.Location {
		if len(l.Line) > 0 && strings.HasPrefix(l.Line[len(l.Line)-1].Function.Name, "JS:*") {
			if l.Mapping == nil || l.Mapping.File != "[jit]" {
				t.Errorf("location %s in mapping %+v, want [jit]", l.Line[len(l.Line)-1].Function.Name, l.Mapping)
			}
			jit++
		}
	}
	if jit == 0 {
		t.Error("no JS:* location in the pprof profile")
	}
}

// TestReportJITDumpLikePerf: report of a perf record -k mono recording of
// Node --perf-prof names the JIT frames from the jitdump the recording's
// MMAP events name, as perf inject --jit followed by perf report does:
// each JavaScript function holds the same share of the samples' leaves
// (within 3 points).
func TestReportJITDumpLikePerf(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("running as uid %d: perf record is tested as root", os.Geteuid())
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skipf("no node: %v", err)
	}
	perf, err := exec.LookPath("perf")
	if err != nil {
		t.Skipf("no perf: %v", err)
	}
	dir := t.TempDir() // the jitdump, perf inject's jitted-*.so and perf's build-id cache (HOME)
	js := filepath.Join(dir, "spin.js")
	if err := os.WriteFile(js, []byte(nodeSpin), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) string {
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = dir, append(os.Environ(), "HOME="+dir)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %q: %v\n%s", name, args, err, errb.String())
		}
		return out.String()
	}
	data := filepath.Join(dir, "perf.data")
	run(perf, "record", "-q", "-k", "mono", "-g", "-F", "499", "-o", data, "--", node, "--perf-prof", js)
	run(perf, "inject", "--jit", "-i", data, "-o", data+".jit")
	theirs := map[string]float64{}
	for _, l := range strings.Split(run(perf, "report", "-i", data+".jit", "--stdio", "--no-children", "--sort", "sym", "-g", "none"), "\n") {
		var pct float64
		if f := strings.Fields(l); len(f) > 2 && f[1] == "[.]" && strings.HasPrefix(f[2], "JS:") {
			fmt.Sscanf(f[0], "%f%%", &pct)
			theirs[strings.Join(f[2:], " ")] += pct
		}
	}
	folded := filepath.Join(dir, "out.folded")
	run(rewindBin, "report", "-o", folded, data)
	b, err := os.ReadFile(folded)
	if err != nil {
		t.Fatal(err)
	}
	ours, total := map[string]float64{}, 0
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		i := strings.LastIndexByte(l, ' ')
		var n int
		fmt.Sscan(l[i+1:], &n)
		total += n
		leaf := l[strings.LastIndexByte(l[:i], ';')+1 : i]
		ours[leaf] += float64(n)
	}
	if len(theirs) == 0 || total < 200 {
		t.Fatalf("perf named no JS: functions, or rewind read %d samples", total)
	}
	for name, pct := range theirs {
		our := 100 * ours[name] / float64(total)
		t.Logf("%s: perf %.1f%%, rewind %.1f%%", name, pct, our)
		if pct >= 5 && (our < pct-3 || our > pct+3) {
			t.Errorf("%s: %.1f%% of the leaves, perf inject --jit + perf report %.1f%%", name, our, pct)
		}
	}
}

// nodeNested spins in jsHot <- jsMid <- jsTop for two seconds.
const nodeNested = `function jsHot(n) { let s = 0; for (let i = 0; i < n; i++) s += Math.sqrt(i ^ n); return s; }
function jsMid(n) { return jsHot(n) + 1; }
function jsTop(n) { return jsMid(n) * 2; }
const end = Date.now() + 2000;
let t = 0;
while (Date.now() < end) t += jsTop(1e5);
`

// TestRecordJITNodePerfMap records Node with --perf-basic-prof
// --interpreted-frames-native-stack in both modes, as perf record -g is
// used with it: >= 95% of the samples reach the thread root through V8's
// frames (frame pointers), and >= 90% of those running JavaScript are
// named from the perf map (JS:*jsHot, JS:~jsMid, or the script's top
// level "JS:* app.js:1:1" whose loop TurboFan compiled with the calls
// inlined: V8's optimized or interpreted functions, as perf report shows
// them).
func TestRecordJITNodePerfMap(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("running as uid %d: recording is tested as root", os.Geteuid())
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("no node (.ci/run installs nodejs): %v", err)
	}
	dir := t.TempDir()
	js := filepath.Join(dir, "app.js")
	if err := os.WriteFile(js, []byte(nodeNested), 0o644); err != nil {
		t.Fatal(err)
	}
	before, _ := filepath.Glob("/tmp/perf-*.map")
	t.Cleanup(func() { removeNewPerfMaps(before) })
	for _, mode := range []string{"user", "kernel"} {
		t.Run(mode, func(t *testing.T) {
			folded := filepath.Join(dir, mode+".folded")
			_, stderr, code := run(t, "record", "--unwind-in", mode, "-F", "499", "-o", folded, "--", node, "--perf-basic-prof", "--interpreted-frames-native-stack", v8Log(dir), js)
			if code != 0 {
				t.Fatalf("record exited %d:\n%s", code, stderr)
			}
			checkJITRecording(t, mode, stderr, folded, 200,
				func(l string) bool { return strings.Contains(l, ";Builtins_JSEntry") }, // (the main thread running JavaScript)
				func(l string) bool { return strings.Contains(l, ";JS:") })
		})
	}
}

// removeNewPerfMaps removes the perf maps that were not in before and
// whose process has exited (Node leaves its map behind).
func removeNewPerfMaps(before []string) {
	old := map[string]bool{}
	for _, m := range before {
		old[m] = true
	}
	now, _ := filepath.Glob("/tmp/perf-*.map")
	for _, m := range now {
		var pid int
		if old[m] || func() bool { _, err := fmt.Sscanf(filepath.Base(m), "perf-%d.map", &pid); return err != nil }() {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			os.Remove(m)
		}
	}
}

// TestReportPerfMapLikePerf: report of a perf record -g recording of Node
// with --perf-basic-prof names the JIT frames from the perf map Node left
// behind, as perf report does with the same file: each JavaScript
// function holds the same share of the samples' leaves (within 3 points).
func TestReportPerfMapLikePerf(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("running as uid %d: perf record is tested as root", os.Geteuid())
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("no node (.ci/run installs nodejs): %v", err)
	}
	perf, err := exec.LookPath("perf")
	if err != nil {
		t.Fatalf("no perf (.ci/run installs linux-perf): %v", err)
	}
	dir := t.TempDir() // (HOME: perf's build-id cache)
	js := filepath.Join(dir, "app.js")
	if err := os.WriteFile(js, []byte(nodeNested), 0o644); err != nil {
		t.Fatal(err)
	}
	before, _ := filepath.Glob("/tmp/perf-*.map")
	t.Cleanup(func() { removeNewPerfMaps(before) })
	runIn := func(name string, args ...string) string {
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = dir, append(os.Environ(), "HOME="+dir)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %q: %v\n%s", name, args, err, errb.String())
		}
		return out.String()
	}
	data := filepath.Join(dir, "perf.data")
	runIn(perf, "record", "-q", "-g", "-F", "499", "-o", data, "--", node, "--perf-basic-prof", "--interpreted-frames-native-stack", js)
	theirs := map[string]float64{}
	for _, l := range strings.Split(runIn(perf, "report", "-i", data, "--stdio", "--no-children", "--sort", "sym", "-g", "none"), "\n") {
		var pct float64
		if f := strings.Fields(l); len(f) > 2 && f[1] == "[.]" && strings.HasPrefix(f[2], "JS:") {
			fmt.Sscanf(f[0], "%f%%", &pct)
			theirs[strings.Join(f[2:], " ")] += pct
		}
	}
	folded := filepath.Join(dir, "out.folded")
	runIn(rewindBin, "report", "-o", folded, data)
	b, err := os.ReadFile(folded)
	if err != nil {
		t.Fatal(err)
	}
	ours, total := map[string]float64{}, 0
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		i := strings.LastIndexByte(l, ' ')
		n, _ := strconv.Atoi(l[i+1:])
		total += n
		ours[l[strings.LastIndexByte(l[:i], ';')+1:i]] += float64(n)
	}
	if len(theirs) == 0 || total < 200 {
		t.Fatalf("perf named no JS: functions, or rewind read %d samples", total)
	}
	for name, pct := range theirs {
		our := 100 * ours[name] / float64(total)
		t.Logf("%s: perf %.1f%%, rewind %.1f%%", name, pct, our)
		if pct >= 5 && (our < pct-3 || our > pct+3) {
			t.Errorf("%s: %.1f%% of the leaves, perf report %.1f%%", name, our, pct)
		}
	}
}
