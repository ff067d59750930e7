package bpfunwind

import (
	"strings"
	"testing"
	"time"

	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
)

// TestWalkCacheTellsPathsApart counts a program that blocks ten times
// under one caller, then ten times under another, reaching the system
// call with the same PC and SP each time (testdata/twopaths.c): the walk
// cache reuses a walk only when the stack's words read back unchanged, so
// each caller's blocked intervals are counted under its own stack, about
// as many under each (a reuse across the switch would put most under
// one).
func TestWalkCacheTellsPathsApart(t *testing.T) {
	pid, _ := startC(t, "twopaths", "-fomit-frame-pointer")
	u := loadOffCPU(t, pid)
	space := target.NewAddressSpace(u.Maps(pid), &target.Objects{})
	sym := &symbolize.Symbolizer{}
	var a, b, other uint64
	deadline := time.Now().Add(time.Minute)
	for a+b+other < 400 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		stacks, err := u.Read()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range stacks {
			if s.PID != pid || !s.OffCPU {
				continue
			}
			fns := strings.Join(names(sym, space, s), ";")
			switch {
			case strings.Contains(fns, "waiter;path_a;main;"):
				a += s.Events
			case strings.Contains(fns, "waiter;path_b;main;"):
				b += s.Events
			default:
				other += s.Events
			}
		}
	}
	t.Logf("%d blocked intervals under path_a, %d under path_b, %d under neither", a, b, other)
	if a+b < 300 || a*10 < (a+b)*4 || b*10 < (a+b)*4 {
		t.Errorf("%d blocked intervals under path_a and %d under path_b: want at least 300, each at least 40%%", a, b)
	}
}
