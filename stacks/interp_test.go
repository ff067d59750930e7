package stacks

import (
	"testing"

	"github.com/rewindstack/rewind/output"
	"github.com/rewindstack/rewind/target"
)

// TestWithInterpActivations: the interpreted frames of each activation
// go before that activation's native entry frame (innermost first); Lua
// frames, all of activation 0, before the first; frames of activations
// with no entry frame left, at the end; an inlined frame of the entry's
// name is not an entry.
func TestWithInterpActivations(t *testing.T) {
	native := []output.Frame{
		{Function: "lock"}, {Function: "eval", Inlined: true}, {Function: "eval"}, {Function: "call"}, {Function: "eval"}, {Function: "main"},
	}
	names := func(fs []output.Frame) string {
		s := ""
		for _, f := range fs {
			s += f.Function + " "
		}
		return s
	}
	py := []target.InterpFrame{{Function: "a"}, {Function: "b"}, {Function: "c", Activation: 1}, {Function: "d", Activation: 2}}
	if got, want := names(withInterp(native, py, "eval", nil)), "lock eval a b eval call c eval main d "; got != want {
		t.Errorf("python: %q, want %q", got, want)
	}
	lua := []target.InterpFrame{{Function: "x"}, {Function: "y"}}
	if got, want := names(withInterp(native, lua, "eval", nil)), "lock eval x y eval call eval main "; got != want {
		t.Errorf("lua: %q, want %q", got, want)
	}
	if got, want := names(withInterp(native, lua, "none", nil)), "lock eval eval call eval main x y "; got != want {
		t.Errorf("no entry: %q, want %q", got, want)
	}
	// Anchored (no symbol needed): before the frames the anchors name.
	if got, want := names(withInterp(native, py, "none", map[int]int{0: 2, 1: 4, 2: 5})), "lock eval a b eval call c eval d main "; got != want {
		t.Errorf("anchored: %q, want %q", got, want)
	}
	// One activation without an anchor: by name for all.
	if got, want := names(withInterp(native, py, "eval", map[int]int{0: 2, 2: 5})), "lock eval a b eval call c eval main d "; got != want {
		t.Errorf("partly anchored: %q, want %q", got, want)
	}
}
