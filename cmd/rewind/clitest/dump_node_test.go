package clitest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
)

// nodePark blocks in jsHot <- jsMid <- jsTop (Atomics.wait, a futex wait
// called from the JavaScript function itself).
const nodePark = `function jsHot() { Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0); }
function jsMid() { jsHot(); }
function jsTop() { jsMid(); }
console.log("ready");
jsTop();
`

// v8Log is the flag that has V8 write its log (which --perf-basic-prof
// turns on) in dir, not in the working directory: the source tree.
func v8Log(dir string) string { return "--logfile=" + filepath.Join(dir, "v8.log") }

// TestDumpNodeParkedInJS dumps a Node process (--perf-basic-prof
// --interpreted-frames-native-stack) parked inside JavaScript: its main
// thread's frames hold jsHot, jsMid and jsTop in that order, named from
// the perf map, marked "jit" and found by frame pointers through V8's
// frames, as perf report names them.
func TestDumpNodeParkedInJS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("running as uid %d: dumps of another user's process are tested as root", os.Geteuid())
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("no node (.ci/run installs nodejs): %v", err)
	}
	js := filepath.Join(t.TempDir(), "park.js")
	if err := os.WriteFile(js, []byte(nodePark), 0o644); err != nil {
		t.Fatal(err)
	}
	p := fixture.Start(t, node, "--perf-basic-prof", "--interpreted-frames-native-stack", v8Log(filepath.Dir(js)), js)
	t.Cleanup(func() { fixture.RemovePerfMap(p.PID) })
	stdout, stderr, code := run(t, "dump", "--json", strconv.Itoa(p.PID))
	if code != 0 {
		t.Fatalf("dump exited %d:\n%s", code, stderr)
	}
	var rep struct {
		Threads []struct {
			TID    int `json:"tid"`
			Frames []struct {
				Function *string `json:"function"`
				Method   string  `json:"method"`
				JIT      bool    `json:"jit"`
			} `json:"frames"`
		} `json:"threads"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, th := range rep.Threads {
		if th.TID != p.PID {
			continue
		}
		want := []string{"JS:~jsHot ", "JS:~jsMid ", "JS:~jsTop "}
		for _, f := range th.Frames {
			name := ""
			if f.Function != nil {
				name = *f.Function
			}
			names = append(names, name)
			if len(want) > 0 && strings.HasPrefix(name, want[0]) {
				if !f.JIT || f.Method != "fp" {
					t.Errorf("%s: jit %v, method %s, want jit by fp", name, f.JIT, f.Method)
				}
				want = want[1:]
			}
		}
		if len(want) > 0 {
			t.Errorf("the main thread's frames lack %q in order:\n%s", want, strings.Join(names, "\n"))
		}
		return
	}
	t.Fatalf("no thread %d in the dump:\n%s", p.PID, stdout)
}
