package agent

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/internal/testutil/perftest"
)

// TestAgentNamesLuaAndRuby (issue 41 item 3): the agent's CPU periods,
// unwinding in the kernel, name the hot function of a CPU-bound script
// run by Debian's luajit and ruby, under its caller, in at least 85% of
// each process's stacks (by their sampled time).
func TestAgentNamesLuaAndRuby(t *testing.T) {
	perftest.RequirePerfEvent(t)
	if !kernelPermitted() {
		t.Skip("the in-kernel unwinder needs root")
	}
	dir := t.TempDir()
	scripts := []struct {
		interp, file, src, hot, caller string
	}{
		{"luajit", "hot.lua", fixture.LuaHot, "lua_hot", "lua_mid"},
		{"ruby", "hot.rb", fixture.RubyHot, "rb_hot", "rb_mid"},
	}
	pids := map[int]int{}
	for i, s := range scripts {
		bin, err := exec.LookPath(s.interp)
		if err != nil {
			t.Fatalf("no %s (.ci/run installs it): %v", s.interp, err)
		}
		path := filepath.Join(dir, s.file)
		if err := os.WriteFile(path, []byte(s.src), 0o644); err != nil {
			t.Fatal(err)
		}
		pids[start(t, bin, path, "60").Process.Pid] = i
	}
	c := runFor(t, Config{Comm: regexp.MustCompile(`^(luajit|ruby)$`), UnwindIn: UnwindKernel}, 4*time.Second)
	total, named := make([]int64, len(scripts)), make([]int64, len(scripts))
	for _, p := range c.got {
		if p.Type != TypeCPU {
			continue
		}
		for _, st := range p.Profile.Stacks {
			i, ok := pids[st.PID]
			if !ok {
				continue
			}
			total[i] += st.Value
			var fns []string
			for _, l := range st.Locations {
				for _, ln := range l.Lines {
					fns = append(fns, ln.Function)
				}
			}
			for j := 0; j+1 < len(fns); j++ {
				if fns[j] == scripts[i].hot && fns[j+1] == scripts[i].caller {
					named[i] += st.Value
					break
				}
			}
		}
	}
	for i, s := range scripts {
		pct := 100 * float64(named[i]) / float64(max(total[i], 1))
		t.Logf("%s: %s under %s in %.1f%% of the sampled time", s.interp, s.hot, s.caller, pct)
		if total[i] == 0 || pct < 85 {
			t.Errorf("%s: %s under %s in %.1f%% of the sampled time, want at least 85%%", s.interp, s.hot, s.caller, pct)
		}
	}
}
