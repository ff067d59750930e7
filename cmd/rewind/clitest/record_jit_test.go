package clitest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/rewindstack/rewind/internal/fixture"
)

// TestRecordJITPerfMap records a program running generated code named in
// its perf map: most samples are named from the map exactly, as perf
// report names them. (User mode only so far: the kernel walk's profile
// holds no anonymous mappings yet, and its walk ends at such code.)
func TestRecordJITPerfMap(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("running as uid %d: recording is tested as root (CAP_PERFMON or kernel.perf_event_paranoid <= 2 would do)", os.Geteuid())
	}
	exe := fixture.BuildC(t, fixture.JITSource)
	dir := t.TempDir()
	defer fixture.RemovePerfMaps()
	for _, mode := range []string{"user"} {
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
