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
	on := func(entry string, fs []target.InterpFrame) []target.InterpStack {
		return []target.InterpStack{{Entry: entry, Frames: fs}}
	}
	// holding finds the native frames of anchors 1, 2 and 3 (activations
	// 0, 1 and 2) in at.
	holding := func(at map[uint64]int) func(uint64) int {
		return func(a uint64) int {
			if i, ok := at[a]; ok {
				return i
			}
			return -1
		}
	}
	py := []target.InterpFrame{{Function: "a", Anchor: 1}, {Function: "b", Anchor: 1}, {Function: "c", Activation: 1, Anchor: 2}, {Function: "d", Activation: 2, Anchor: 3}}
	if got, want := names(withInterp(native, on("eval", py), nil)), "lock eval a b eval call c eval main d "; got != want {
		t.Errorf("python: %q, want %q", got, want)
	}
	lua := []target.InterpFrame{{Function: "x"}, {Function: "y"}}
	if got, want := names(withInterp(native, on("eval", lua), nil)), "lock eval x y eval call eval main "; got != want {
		t.Errorf("lua: %q, want %q", got, want)
	}
	if got, want := names(withInterp(native, on("none", lua), nil)), "lock eval eval call eval main x y "; got != want {
		t.Errorf("no entry: %q, want %q", got, want)
	}
	// Anchored (no symbol needed): before the frames the anchors name.
	if got, want := names(withInterp(native, on("none", py), holding(map[uint64]int{1: 2, 2: 4, 3: 5}))), "lock eval a b eval call c eval d main "; got != want {
		t.Errorf("anchored: %q, want %q", got, want)
	}
	// One activation without an anchor: by name for all.
	if got, want := names(withInterp(native, on("eval", py), holding(map[uint64]int{1: 2, 3: 5}))), "lock eval a b eval call c eval main d "; got != want {
		t.Errorf("partly anchored: %q, want %q", got, want)
	}
}
