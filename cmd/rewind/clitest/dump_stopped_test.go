package clitest

import (
	"encoding/json"
	"os"
	"strconv"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
)

// TestDumpSaysStopped (issue 42 item 2): a dump of a process whose
// threads all block in the kernel reads them in place, and its JSON says
// "stopped": false for each; with --stop, "stopped": true for each.
func TestDumpSaysStopped(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("running as uid %d: reading blocked threads in place needs BPF (root, or CAP_BPF+CAP_PERFMON+CAP_SYS_PTRACE)", os.Geteuid())
	}
	p := fixture.Start(t, fixture.Build(t, "threads", fixture.Variants[3]))
	for _, c := range []struct {
		args    []string
		stopped bool
	}{{nil, false}, {[]string{"--stop"}, true}} {
		args := append(append([]string{"dump", "--json"}, c.args...), strconv.Itoa(p.PID))
		stdout, stderr, code := run(t, args...)
		if code != 0 {
			t.Fatalf("dump %v exited %d:\n%s", c.args, code, stderr)
		}
		var rep struct {
			Threads []struct {
				TID     int   `json:"tid"`
				Stopped *bool `json:"stopped"`
			} `json:"threads"`
		}
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatal(err)
		}
		if len(rep.Threads) != len(p.TIDs) {
			t.Errorf("dump %v: %d threads, want %d", c.args, len(rep.Threads), len(p.TIDs))
		}
		for _, th := range rep.Threads {
			if th.Stopped == nil || *th.Stopped != c.stopped {
				t.Errorf("dump %v: thread %d has stopped %v, want %v\n%s", c.args, th.TID, th.Stopped, c.stopped, stderr)
			}
		}
	}
}
