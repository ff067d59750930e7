package goshadow

import (
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
)

func TestEditApply(t *testing.T) {
	src := "a\nANCHOR\nb\n"
	for _, tc := range []struct {
		e    Edit
		want string
	}{
		{Edit{File: "f.go", Anchor: "ANCHOR\n", Text: "X\n"}, "a\nANCHOR\nX\nb\n"},
		{Edit{File: "f.go", Anchor: "ANCHOR\n", Text: "X\n", Before: true}, "a\nX\nANCHOR\nb\n"},
		{Edit{File: "f.go", Anchor: "ANCHOR\n", Text: "X\n", Replace: true}, "a\nX\nb\n"},
	} {
		got, err := tc.e.Apply(src)
		if err != nil || got != tc.want {
			t.Errorf("%+v: got %q, %v; want %q", tc.e, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		src, anchor, wantErr string
	}{
		{src, "MISSING", `f.go: anchor "MISSING" not found`},
		{src + src, "ANCHOR", `f.go: anchor "ANCHOR" found 2 times`},
		{src, "", "f.go: empty anchor"},
	} {
		_, err := Edit{File: "f.go", Anchor: tc.anchor, Text: "x"}.Apply(tc.src)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("anchor %q: error %v, want one containing %q", tc.anchor, err, tc.wantErr)
		}
	}
}

// TestGenerateRefusesChangedRuntime patches a copy of the runtime in which
// one anchor was altered: Generate must name the file and the anchor.
func TestGenerateRefusesChangedRuntime(t *testing.T) {
	root, err := GOROOT()
	if err != nil {
		t.Skip("no go command:", err)
	}
	fake := t.TempDir()
	rt := filepath.Join(fake, "src", "runtime")
	if err := os.MkdirAll(rt, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, e := range runtimeEdits {
		b, err := os.ReadFile(filepath.Join(root, "src", "runtime", e.File))
		if err != nil {
			t.Fatal(err)
		}
		if e.File == "traceback.go" {
			b = []byte(strings.Replace(string(b), "frame.varp = frame.fp", "frame.varp = frame.fp + 0", 1))
		}
		if err := os.WriteFile(filepath.Join(rt, e.File), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err = Generate(fake, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "traceback.go") || !strings.Contains(err.Error(), `frame.varp = frame.fp\n`) {
		t.Fatalf("Generate on a changed runtime: %v", err)
	}
	t.Log(err)
}

var (
	overlayOnce sync.Once
	overlayRes  *Result
	overlayErr  error
)

// testOverlay generates the overlay once per test binary.
func testOverlay(t *testing.T) *Result {
	t.Helper()
	overlayOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rewind-goshadow-test-")
		if err != nil {
			overlayErr = err
			return
		}
		overlayRes, overlayErr = Generate("", dir)
	})
	if overlayErr != nil {
		t.Fatal(overlayErr)
	}
	return overlayRes
}

func TestMain(m *testing.M) {
	code := fixture.Main(m)
	if overlayRes != nil {
		os.RemoveAll(overlayRes.Dir)
	}
	os.Exit(code)
}

func TestGenerate(t *testing.T) {
	res := testOverlay(t)
	b, err := os.ReadFile(res.JSON)
	if err != nil {
		t.Fatal(err)
	}
	var ov struct{ Replace map[string]string }
	if err := json.Unmarshal(b, &ov); err != nil {
		t.Fatal(err)
	}
	patched := map[string]bool{}
	for _, e := range append(runtimeEdits, tortureEdits...) {
		patched[e.File] = true
	}
	if len(ov.Replace) != len(res.Files) || len(res.Files) != len(patched)+len(runtimeFiles)+len(captureVariants) {
		t.Errorf("overlay has %d entries, result %d files: %v", len(ov.Replace), len(res.Files), res.Files)
	}
	for from, to := range ov.Replace {
		if !strings.HasPrefix(from, filepath.Join(res.GOROOT, "src", "runtime")+string(filepath.Separator)) {
			t.Errorf("overlay replaces %s, outside the runtime", from)
		}
		if _, err := os.Stat(to); err != nil {
			t.Error(err)
		}
	}
}

func moduleRoot(t *testing.T) string {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Skip("no go command:", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// goTest runs `go test` with the overlay and the rewind_shadow tag.
func goTest(t *testing.T, res *Result, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"test", res.Flag(), "-tags", "rewind_shadow"}, args...)...)
	cmd.Dir = moduleRoot(t)
	cmd.Env = append(os.Environ(), env...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("%s go test %s: %v", strings.Join(env, " "), strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("%s go test %s: %v\n%s", strings.Join(env, " "), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestShadowTests builds gostack's shadow tests with the overlay and runs
// them: equivalence with the plain frame-pointer walk and runtime.Callers
// over random call/return/panic sequences, result registers, deep
// recursion, stack copying, Goexit, runtime.Stack, and the stress test with
// GC, CPU/block/mutex/heap profiles and the execution tracer. The second run
// turns on the torture hooks, so every runtime.Callers, runtime.Stack,
// runtime.GC, panic and deferred return also patches its caller.
func TestShadowTests(t *testing.T) {
	res := testOverlay(t)
	for _, env := range [][]string{nil, {"REWIND_SHADOW_TORTURE=1"}} {
		out := goTest(t, res, env, "-short", "-count=1", "-run", "Shadow", "./gostack")
		if !strings.Contains(out, "ok") {
			t.Fatalf("unexpected output:\n%s", out)
		}
	}
}

// TestShadowTestsARM64 runs the same tests built for arm64 under qemu-user.
func TestShadowTestsARM64(t *testing.T) {
	if runtime.GOARCH == "arm64" {
		t.Skip("TestShadowTests covers arm64 natively")
	}
	qemu, err := exec.LookPath("qemu-aarch64")
	if err != nil {
		t.Skip("qemu-aarch64 (package qemu-user) is not installed: cannot run arm64 code")
	}
	res := testOverlay(t)
	out := goTest(t, res, []string{"GOARCH=arm64", "REWIND_SHADOW_TORTURE=1", "REWIND_SHADOW_EXEC=" + qemu}, "-exec", qemu, "-short", "-count=1", "-run", "Shadow", "./gostack")
	if !strings.Contains(out, "ok") {
		t.Fatalf("unexpected output:\n%s", out)
	}
}

var runtimeTests = flag.Bool("runtimetests", false, "also run the Go runtime's own tests (a subset) with the overlay, plain and with REWIND_SHADOW_TORTURE=1 (several minutes)")

// runtimeSubset selects the runtime's tests about unwinding and the machinery
// the overlay touches.
const runtimeSubset = "Traceback|Callers|Stack|Panic|Defer|Preempt|GC"

// TestRuntimeTests runs `go test -short -run runtimeSubset runtime` with the
// overlay (GOFLAGS, so the test programs the runtime tests build use it
// too), once plain and once with the torture hooks on. It takes minutes, so
// it runs only with -runtimetests.
func TestRuntimeTests(t *testing.T) {
	if !*runtimeTests {
		t.Skip("pass -runtimetests to run the Go runtime's tests with the overlay")
	}
	res := testOverlay(t)
	for _, torture := range []string{"0", "1"} {
		cmd := exec.Command("go", "test", "-short", "-count=1", "-run", runtimeSubset, "runtime")
		cmd.Dir = t.TempDir()
		cmd.Env = append(os.Environ(), "GOFLAGS="+res.Flag(), "REWIND_SHADOW_TORTURE="+torture)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		t.Logf("REWIND_SHADOW_TORTURE=%s go test -short -run '%s' runtime: %v\n%s", torture, runtimeSubset,
			time.Since(start).Round(time.Second), lastLines(string(out), 3))
		if err != nil {
			t.Errorf("runtime tests failed: %v\n%s", err, lastLines(string(out), 60))
		}
	}
}

// TestRuntimeTestsARM64 runs the same subset built for arm64 under
// qemu-aarch64, with the torture hooks on. Without binfmt_misc the tests
// that start a child process (test programs, re-executing the test binary,
// gdb) cannot run arm64 code, and qemu-user's fork of a threaded process can
// hang, so those are skipped: they are found by scanning the runtime's test
// sources for functions that start processes, and the functions calling
// them. Runs only with -runtimetests.
func TestRuntimeTestsARM64(t *testing.T) {
	if !*runtimeTests {
		t.Skip("pass -runtimetests to run the Go runtime's tests with the overlay")
	}
	qemu, err := exec.LookPath("qemu-aarch64")
	if err != nil {
		t.Skip("qemu-aarch64 (package qemu-user) is not installed: cannot run arm64 code")
	}
	res := testOverlay(t)
	skip, n, err := childProcessTests(filepath.Join(res.GOROOT, "src", "runtime"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "test", "-v", "-short", "-count=1", "-exec", qemu, "-run", runtimeSubset, "-skip", skip, "runtime")
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "GOARCH=arm64", "GOFLAGS="+res.Flag(), "REWIND_SHADOW_TORTURE=1")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	passed := strings.Count(string(out), "--- PASS")
	t.Logf("GOARCH=arm64 REWIND_SHADOW_TORTURE=1 go test -exec qemu-aarch64 -short -run '%s' runtime (%d tests that start processes skipped): %v, %d passed\n%s",
		runtimeSubset, n, time.Since(start).Round(time.Second), passed, lastLines(string(out), 2))
	if err != nil {
		t.Errorf("runtime tests failed: %v\n%s", err, lastLines(string(out), 60))
	}
	if passed < 20 {
		t.Errorf("only %d runtime tests passed", passed)
	}
}

// childProcessTests returns a -skip pattern matching the runtime tests that
// start processes, directly or through helpers, and how many there are.
func childProcessTests(dir string) (string, int, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return "", 0, err
	}
	funcRE := regexp.MustCompile(`(?m)^func (?:\([^)]*\) )?(\w+)`)
	starts := regexp.MustCompile(`runTestProg|buildTestProg|testenv\.Command|exec\.Command|MustHaveExec|os\.Args\[0\]|runBuiltTestProg|testenv\.Executable|CleanCmdEnv|startTestProg|gdb|lldb`)
	bodies := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", 0, err
		}
		src := string(b)
		locs := funcRE.FindAllStringSubmatchIndex(src, -1)
		for i, l := range locs {
			end := len(src)
			if i+1 < len(locs) {
				end = locs[i+1][0]
			}
			name := src[l[2]:l[3]]
			bodies[name] += src[l[0]:end]
		}
	}
	bad := map[string]bool{}
	for name, body := range bodies {
		if starts.MatchString(body) {
			bad[name] = true
		}
	}
	for changed := true; changed; {
		changed = false
		for name, body := range bodies {
			if bad[name] {
				continue
			}
			for b := range bad {
				if strings.Contains(body, b+"(") {
					bad[name], changed = true, true
					break
				}
			}
		}
	}
	var tests []string
	for name := range bad {
		if strings.HasPrefix(name, "Test") {
			tests = append(tests, name)
		}
	}
	slices.Sort(tests)
	return "^(" + strings.Join(tests, "|") + ")$", len(tests), nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestGenerateRefusesPlantedLinks: symbolic links planted in the overlay
// directory (overlay.json, a patched file's name) are not followed: their
// targets are untouched and Generate refuses, naming the link.
func TestGenerateRefusesPlantedLinks(t *testing.T) {
	if _, err := GOROOT(); err != nil {
		t.Skipf("no Go installation: %v", err)
	}
	for _, name := range []string{"overlay.json", runtimeEdits[0].File} {
		dir := t.TempDir()
		target := filepath.Join(t.TempDir(), "precious")
		if err := os.WriteFile(target, []byte("precious"), 0o600); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(dir, name)
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		_, err := Generate("", dir)
		if err == nil || !strings.Contains(err.Error(), link) || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("Generate with a link at %s: %v, want a refusal naming it", name, err)
		}
		if b, _ := os.ReadFile(target); string(b) != "precious" {
			t.Errorf("link target of %s overwritten: %.40q", name, b)
		}
		if st, err := os.Stat(target); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("link target's mode: %v %v", st.Mode(), err)
		}
	}
}
