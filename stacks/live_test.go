package stacks_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/stacks"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// TestLiveMatchesEuStack captures running fixture programs (copied stacks,
// and --lazy) and checks every thread against `eu-stack -p`, as the core
// tests do, and that every thread runs again afterwards.
func TestLiveMatchesEuStack(t *testing.T) {
	for _, p := range []program{{"threads", nil}, {"plt", nil}, {"signal", []string{"busy"}}, {"recurse", []string{"2000"}}, {"demo", nil}, {"cxxthrow", nil}} {
		for _, v := range []fixture.Variant{fixture.Variants[0], fixture.Variants[3]} {
			p, v := p, v
			t.Run(p.String()+"/"+v.Name, func(t *testing.T) {
				t.Parallel()
				exe := fixture.Build(t, p.name, v)
				proc := fixture.Start(t, exe, p.args...)
				ref, err := fixture.EuStackPID(t, proc.PID)
				if err != nil {
					t.Fatalf("eu-stack: %v", err)
				}
				snap, err := live.Capture(proc.PID, live.Options{})
				if err != nil {
					t.Fatal(err)
				}
				checkRunning(t, proc.PID)
				tg := snap.Target(&target.Objects{}, func(s string) { t.Log(s) })
				compareTarget(t, tg, ref)
				// Partial unwind tables, as dumps compile them (only the
				// FDEs the walks look into).
				partial := &target.Objects{}
				partial.Tables.Partial = true
				ptg := snap.Target(partial, nil)
				compareTarget(t, ptg, ref)
				if !anyPartial(ptg) {
					t.Error("no object got a partial unwind table")
				}

				err = live.WithStopped(proc.PID, live.Options{}, func(s *live.Snapshot) error {
					compareTarget(t, s.Target(&target.Objects{}, nil), ref)
					return nil
				})
				if err != nil {
					t.Fatalf("lazy: %v", err)
				}
				checkRunning(t, proc.PID)
			})
		}
	}
}

// anyPartial reports whether an object of tg has a partial unwind table.
func anyPartial(tg *target.Target) bool {
	for _, m := range tg.Space.Mappings() {
		if m.Module != nil {
			if tab, err := m.Module.Table(); err == nil && tab != nil && tab.Partial() {
				return true
			}
		}
	}
	return false
}

// compareTarget applies the core tests' rules: dwarf and auto equal
// eu-stack frame for frame, fp loses frames only below callees without a
// frame record.
func compareTarget(t *testing.T, tg *target.Target, ref []fixture.Stack) {
	t.Helper()
	if len(tg.Contexts) != len(ref) {
		t.Errorf("captured %d threads, eu-stack printed %d", len(tg.Contexts), len(ref))
	}
	sym := &symbolize.Symbolizer{}
	for _, method := range []string{"dwarf", "auto", "fp"} {
		u := must(unwind.ByName(method))
		u.MaxDepth = 100000
		rep := stacks.Unwind(tg, stacks.Options{Unwinder: u}, sym)
		for _, want := range ref {
			got := findThread(rep, want.TID)
			switch {
			case got == nil:
				t.Errorf("%s: thread %d missing", method, want.TID)
			case method == "fp":
				checkFPBreak(t, got, want, tg.Space)
			case !samePCs(got, want):
				t.Errorf("%s: thread %d differs from eu-stack (end %s %s):\n%s", method, want.TID,
					got.End, got.EndDetail, sideBySide(got, want))
			default:
				checkNames(t, method, got, want, tg.Space, sym)
			}
		}
	}
}

// checkRunning: no thread of pid is stopped or traced.
func checkRunning(t *testing.T, pid int) {
	t.Helper()
	tasks, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*"))
	for _, task := range tasks {
		st, err := os.ReadFile(filepath.Join(task, "status"))
		if err != nil {
			continue // exited
		}
		for _, line := range strings.Split(string(st), "\n") {
			if (strings.HasPrefix(line, "State:") && (strings.Contains(line, "t (") || strings.Contains(line, "T ("))) ||
				(strings.HasPrefix(line, "TracerPid:") && strings.TrimSpace(line[len("TracerPid:"):]) != "0") {
				t.Errorf("%s left stopped or traced: %s", task, line)
			}
		}
	}
}
