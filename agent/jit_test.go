package agent

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/internal/testutil/perftest"
)

// TestAgentNamesJS (issue 40 item 5): the agent's CPU periods of a Node
// process run with --perf-basic-prof name its JavaScript code from the
// perf map (JS:*jsHot, JS:~jsHot before V8 optimizes it, or the script's
// top level "JS:* spin.js:1:1" once its loop is compiled with jsHot
// inlined), in both unwinding modes.
func TestAgentNamesJS(t *testing.T) {
	perftest.RequirePerfEvent(t)
	if !kernelPermitted() {
		t.Skip("the in-kernel unwinder needs root")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("no node (.ci/run installs nodejs): %v", err)
	}
	js := filepath.Join(t.TempDir(), "spin.js")
	src := `function jsHot(n) { let s = 0; for (let i = 0; i < n; i++) s += Math.sqrt(i ^ n); return s; }
const end = Date.now() + 60000;
let t = 0;
while (Date.now() < end) t += jsHot(1e5);
`
	if err := os.WriteFile(js, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	// (--logfile: V8's log, which --perf-basic-prof turns on, goes with
	// the script, not into the source tree.)
	pid := start(t, node, "--perf-basic-prof", "--logfile="+filepath.Join(filepath.Dir(js), "v8.log"), js).Process.Pid
	t.Cleanup(func() { fixture.RemovePerfMap(pid) })
	for _, mode := range []string{UnwindUser, UnwindKernel} {
		c := runFor(t, Config{Comm: regexp.MustCompile(`^node$`), UnwindIn: mode}, 3*time.Second)
		total, named := 0, 0
		for _, p := range c.got {
			if p.Type != TypeCPU {
				continue
			}
			for _, s := range p.Profile.Stacks {
				if s.PID != pid {
					continue
				}
				total++
			stack:
				for _, l := range s.Locations {
					for _, ln := range l.Lines {
						if strings.HasPrefix(ln.Function, "JS:") && strings.Contains(ln.Function, js+":") {
							named++
							break stack
						}
					}
				}
			}
		}
		t.Logf("unwinding in %s: %d of node's %d stacks name the script's code", mode, named, total)
		if total == 0 || named == 0 {
			t.Errorf("unwinding in %s: %d of node's %d stacks name the script's code from its perf map", mode, named, total)
		}
	}
}
