package profiles

import (
	"strings"
	"testing"

	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
)

// pyEval is the native function of CPython's evaluation loop: each of
// its frames runs one activation's Python frames.
const pyEval = "_PyEval_EvalFrameDefault"

// TestSpliceInterp: each activation's Python frames go just above its
// _PyEval_EvalFrameDefault frame (leaf first), as dump places them;
// activations the native stack has no frame for go above the outermost
// one; a stack without the evaluation loop is left alone.
func TestSpliceInterp(t *testing.T) {
	b := NewBuilder(NewCollector(regs.AMD64), Options{NoSymbols: true})
	native := func(names ...string) []*Location {
		var out []*Location
		for _, n := range names {
			out = append(out, &Location{Lines: []symbolize.Location{{Function: "inlined", Inlined: true}, {Function: n}}})
		}
		return out
	}
	py := func(specs ...string) []target.InterpFrame {
		var out []target.InterpFrame
		for _, s := range specs {
			name, act, _ := strings.Cut(s, "@")
			out = append(out, target.InterpFrame{Function: name, File: "x.py", Line: 1, Method: "python", Activation: int(act[0] - '0')})
		}
		return out
	}
	names := func(locs []*Location) string {
		var s []string
		for _, l := range locs {
			s = append(s, l.Lines[len(l.Lines)-1].Function)
		}
		return strings.Join(s, " ")
	}
	for _, c := range []struct {
		native []string
		interp []target.InterpFrame
		want   string
	}{
		{[]string{"PyLong_FromLong", pyEval, "_PyFunction_Vectorcall", pyEval, "main"},
			py("leaf@0", "middle@0", "outer@1", "<module>@1"),
			"PyLong_FromLong leaf middle _PyEval_EvalFrameDefault _PyFunction_Vectorcall outer <module> _PyEval_EvalFrameDefault main"},
		{[]string{pyEval, "f", pyEval, "main"},
			py("a@0", "b@1", "c@2"),
			"a _PyEval_EvalFrameDefault f b c _PyEval_EvalFrameDefault main"},
		{[]string{"f", "main"}, py("a@0"), "f main"},
	} {
		got := names(b.spliceInterp(native(c.native...), []target.InterpStack{{Entry: pyEval, Frames: c.interp}}))
		if got != c.want {
			t.Errorf("native %v, Python %v:\n got %s\nwant %s", c.native, c.interp, got, c.want)
		}
	}
	// One location per interpreted frame, shared by the samples.
	l1, l2 := b.interpLoc(&py("a@0")[0]), b.interpLoc(&py("a@1")[0])
	if l1 != l2 || l1.Lines[0].Module != "[python]" {
		t.Errorf("interpreted frame locations %p %p (module %q), want one, [python]", l1, l2, l1.Lines[0].Module)
	}
}
