package gostack

import (
	"testing"

	"github.com/rewindstack/rewind/internal/goruntime"
)

// TestUntrustedCoversSwitches: the walk stops trusting frame pointers at
// every function of the runtime's one table of stack switches
// (goruntime.Switches) that moves a goroutine to another stack and can
// be a caller on the stack gostack walks (systemstack, mcall, morestack,
// gogo). gostack keeps its own list because it imports only the standard
// library.
func TestUntrustedCoversSwitches(t *testing.T) {
	n := 0
	for _, s := range goruntime.Switches {
		switch {
		case s.Kind == goruntime.Systemstack, s.Kind == goruntime.Mcall, s.Kind == goruntime.Morestack,
			s.Kind == goruntime.FPSwitch && s.Name == "runtime.gogo":
			n++
			if !untrustedFuncs[s.Name] {
				t.Errorf("%s switches stacks but the walk trusts its frame pointer", s.Name)
			}
		}
	}
	if n < 4 {
		t.Errorf("goruntime.Switches has %d of the four switching functions gostack checks", n)
	}
}
