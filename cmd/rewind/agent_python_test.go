package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
)

// TestAgentPythonFramesInUser runs the agent with --unwind-in user on a
// CPU-bound Debian Python 3.11 script: at least 90% of the samples of
// its periods' pprof profiles (parsed by pprof's own package) hold the
// hot function under its callers, in order, as rewind record's do.
func TestAgentPythonFramesInUser(t *testing.T) {
	const python = "/usr/bin/python3.11"
	if _, err := os.Stat(python); err != nil {
		t.Skipf("%s not installed", python)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "hot.py")
	os.WriteFile(script, []byte(pyHotReady), 0o644)
	pid := startSpinning(t, exec.Command(python, script, "60"))
	out := filepath.Join(dir, "out")
	if o, stderr, code := run(t, "agent", "--unwind-in", "user", "-p", strconv.Itoa(pid), "-F", "199", "-d", "3s", "--period", "1s", "--out-dir", out); code != 0 {
		t.Fatalf("exit %d: %s%s", code, o, stderr)
	}
	files, _ := filepath.Glob(filepath.Join(out, "rewind-cpu-*.pb.gz"))
	if len(files) == 0 {
		t.Fatal("no CPU profile written")
	}
	var total, chain int64
	for _, f := range files {
		r, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		p, err := profile.Parse(r)
		r.Close()
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, s := range p.Sample {
			var names []string
			for _, l := range s.Location {
				for _, ln := range l.Line {
					names = append(names, ln.Function.Name)
				}
			}
			total += s.Value[0]
			if strings.Contains(" "+strings.Join(names, " ")+" ", " leaf middle outer <module> _PyEval_EvalFrameDefault ") {
				chain += s.Value[0]
			}
		}
	}
	share := 100 * float64(chain) / float64(max(total, 1))
	t.Logf("%d profiles, %d samples, %.1f%% under leaf middle outer <module> _PyEval_EvalFrameDefault", len(files), total, share)
	if total == 0 || share < 90 {
		t.Errorf("%.1f%% of %d samples hold leaf middle outer <module> _PyEval_EvalFrameDefault, want at least 90%%", share, total)
	}
}
