package session

import (
	"strings"
	"testing"

	"github.com/rewindstack/rewind/profiles"
	"github.com/rewindstack/rewind/symbolize"
)

// TestMissingPythonNote: a profile whose samples run the evaluation loop
// without a Python frame says so, and why (frames read after each sample
// that could not be read, or not read at all); one with a Python frame,
// or without the loop, says nothing.
func TestMissingPythonNote(t *testing.T) {
	loc := func(fn, module string) *profiles.Location {
		return &profiles.Location{Lines: []symbolize.Location{{Function: fn, Module: module}}}
	}
	eval := loc("_PyEval_EvalFrameDefault", "/usr/bin/python3.11")
	prof := func(locs ...*profiles.Location) *profiles.Profile {
		return &profiles.Profile{Stacks: []profiles.Stack{{Locations: locs, Count: 3}, {Locations: []*profiles.Location{loc("main", "")}}}}
	}
	if n := missingPythonNote(prof(eval, loc("main", "")), "HOW", false); !strings.Contains(n, "75% of the samples") ||
		!strings.Contains(n, "read only by the walk in the kernel: HOW") {
		t.Errorf("not sampled: %q", n)
	}
	if n := missingPythonNote(prof(eval), "HOW", true); !strings.Contains(n, "none of its Python frames could be read from the process") || !strings.HasSuffix(n, "HOW") {
		t.Errorf("sampled: %q", n)
	}
	if n := missingPythonNote(prof(loc("leaf", "[python]"), eval), "HOW", true); n != "" {
		t.Errorf("with a Python frame: %q", n)
	}
	if n := missingPythonNote(prof(loc("f", "")), "HOW", true); n != "" {
		t.Errorf("without the loop: %q", n)
	}
}
