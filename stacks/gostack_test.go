package stacks_test

import (
	"os/exec"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/perftest"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/stacks"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// TestLiveGoSwitchDumps dumps a Go program whose goroutines keep its
// threads switching between goroutine stacks and g0 (runtime.systemstack,
// runtime.mcall, morestack, gogo) 40 times (issue 13 item 5): no frame may
// be a garbage address outside every mapping, no walk may end at a bad
// frame pointer, and every thread's stack must reach its root or end where
// the Go runtime's traceback ends a g0 stack (runtime.mcall,
// runtime.morestack). The same holds for the program built with
// -ldflags='-s -w' (issue 26 item 2), whose switches are found by the pcln
// table's names and whose frames by its SP deltas.
func TestLiveGoSwitchDumps(t *testing.T) {
	for _, v := range []struct {
		name  string
		flags []string
	}{{"dwarf", nil}, {"stripped", []string{"-ldflags=-s -w"}}} {
		t.Run(v.name, func(t *testing.T) { testLiveGoSwitchDumps(t, perftest.BuildGo(t, v.flags...)) })
	}
}

func testLiveGoSwitchDumps(t *testing.T, exe string) {
	cmd := exec.Command(exe, "20", "churn")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	time.Sleep(200 * time.Millisecond)
	objs := &target.Objects{}
	sym := &symbolize.Symbolizer{}
	threads, complete := 0, 0
	for i := 0; i < 40; i++ {
		snap, err := live.Capture(cmd.Process.Pid, live.Options{})
		if err != nil {
			t.Fatal(err)
		}
		tg := snap.Target(objs, nil)
		rep := stacks.Unwind(tg, stacks.Options{Unwinder: unwind.NewAuto()}, sym)
		for _, th := range rep.Threads {
			threads++
			for _, f := range th.Frames {
				if f.Module == "" {
					t.Errorf("dump %d thread %d: frame %#x outside every mapping (end %s %s)", i, th.TID, f.PC, th.End, th.EndDetail)
				}
			}
			if th.End == unwind.EndBadFP.String() {
				t.Errorf("dump %d thread %d ends at a bad frame pointer: %s", i, th.TID, th.EndDetail)
			}
			n := len(th.Frames)
			if stacks.ReachesRoot(&th) || n > 0 && (th.Frames[n-1].Function == "runtime.mcall" || th.Frames[n-1].Function == "runtime.morestack") {
				complete++
			} else {
				var names []string
				for _, f := range th.Frames {
					names = append(names, f.Name())
				}
				t.Logf("dump %d thread %d incomplete (end %s %s): %v", i, th.TID, th.End, th.EndDetail, names)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%d of %d thread stacks complete", complete, threads)
	if complete*100 < threads*99 {
		t.Errorf("%d of %d thread stacks complete, want >= 99%%", complete, threads)
	}
}
