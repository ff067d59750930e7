package stacks_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/testutil/perftest"
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
// runtime.morestack), or be a thread not started yet (runtime.clone
// alone, see unwind's TestGoNewThread; on a loaded machine many are).
//
// It does so with the default capture, which a loaded machine staggers
// now and then, and staggered on purpose (MaxPause 1ns: each thread
// resumes as soon as it is copied): the threads' copies are then taken at
// different times, and one thread's copy, up to 512 KiB of the Go heap
// above its stack pointer, holds an older image of other threads' stacks.
// The same holds for the program built with -ldflags='-s -w' (issue 26
// item 2), whose switches are found by the pcln table's names and whose
// frames by its SP deltas.
func TestLiveGoSwitchDumps(t *testing.T) {
	plain := perftest.BuildGo(t)
	for _, tc := range []struct {
		name  string
		flags []string
		opt   live.Options
	}{
		{"default", nil, live.Options{}},
		{"staggered", nil, live.Options{MaxPause: time.Nanosecond}},
		{"stripped", []string{"-ldflags=-s -w"}, live.Options{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exe := plain
			if tc.flags != nil {
				exe = perftest.BuildGo(t, tc.flags...)
			}
			testGoSwitchDumps(t, exe, tc.opt)
		})
	}
}

func testGoSwitchDumps(t *testing.T, exe string, opt live.Options) {
	cmd := exec.Command(exe, "20", "churn")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	objs := &target.Objects{}
	sym := &symbolize.Symbolizer{}
	threads, complete, newborn, staggered := 0, 0, 0, 0
	for i := 0; i < 40; i++ {
		snap, err := live.Capture(cmd.Process.Pid, opt)
		if err != nil {
			t.Fatal(err)
		}
		if snap.Staggered {
			staggered++
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
			switch {
			case stacks.ReachesRoot(&th) || n > 0 && (th.Frames[n-1].Function == "runtime.mcall" || th.Frames[n-1].Function == "runtime.morestack"):
				complete++
			case n == 1 && th.Frames[0].Function == "runtime.clone" && strings.Contains(th.EndDetail, "new thread"):
				complete++
				newborn++
			default:
				var names []string
				for _, f := range th.Frames {
					names = append(names, f.Name())
				}
				t.Logf("dump %d thread %d incomplete (end %s %s): %v", i, th.TID, th.End, th.EndDetail, names)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%d of %d thread stacks complete (%d of them threads not started yet); %d of 40 captures staggered", complete, threads, newborn, staggered)
	if complete*100 < threads*99 {
		t.Errorf("%d of %d thread stacks complete, want >= 99%%", complete, threads)
	}
	if opt.MaxPause > 0 && opt.MaxPause < time.Microsecond && staggered == 0 {
		t.Errorf("no capture was staggered with MaxPause %v", opt.MaxPause)
	}
}
