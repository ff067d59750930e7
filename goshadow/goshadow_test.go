package goshadow

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
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
	code := m.Run()
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
	t.Logf("go test %s: %v", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("go test %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestShadowTests builds gostack's shadow tests with the overlay and runs
// them: equivalence with the plain frame-pointer walk and runtime.Callers
// over random call/return/panic sequences, result registers, deep
// recursion, stack copying, Goexit, runtime.Stack, and the stress test with
// GC, CPU/block/mutex/heap profiles and the execution tracer.
func TestShadowTests(t *testing.T) {
	res := testOverlay(t)
	out := goTest(t, res, nil, "-short", "-count=1", "-run", "Shadow", "./gostack")
	if !strings.Contains(out, "ok") {
		t.Fatalf("unexpected output:\n%s", out)
	}
}
