package profiles

import (
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
)

// pyEval is the native function of CPython's evaluation loop: each of
// its frames runs one activation's Python frames.
const pyEval = "_PyEval_EvalFrameDefault"

// interpKey identifies an interpreted frame's location.
type interpKey struct {
	function, file, method string
	line                   int
}

// spliceInterp places a sample's interpreted frames (innermost first) in
// its user locations (leaf first): activation k's frames just before
// (leafward of) the k-th frame of the evaluation loop; those of
// activations without one (a walk cut short) after the last such frame.
func (b *Builder) spliceInterp(locs []*Location, interp []target.InterpFrame) []*Location {
	out := make([]*Location, 0, len(locs)+len(interp))
	j, act := 0, 0
	last := -1
	for i, l := range locs {
		if l.Lines[len(l.Lines)-1].Function == pyEval {
			last = i
		}
	}
	for i, l := range locs {
		if l.Lines[len(l.Lines)-1].Function == pyEval {
			for ; j < len(interp) && (interp[j].Activation <= act || i == last); j++ {
				out = append(out, b.interpLoc(&interp[j]))
			}
			act++
		}
		out = append(out, l)
	}
	if last < 0 {
		// No evaluation loop among the native frames (its symbol
		// unknown): the native stack as it is.
		return locs
	}
	return out
}

// interpLoc returns the location of an interpreted frame: no address nor
// mapping, the function, file and line the interpreter gives.
func (b *Builder) interpLoc(f *target.InterpFrame) *Location {
	k := interpKey{f.Function, f.File, f.Method, f.Line}
	if l := b.interp[k]; l != nil {
		return l
	}
	line := max(f.Line, 0)
	l := b.newLoc(0, nil, false, []symbolize.Location{{Function: f.Function, File: f.File, Line: line, Module: "[" + f.Method + "]"}})
	if b.interp == nil {
		b.interp = map[interpKey]*Location{}
	}
	b.interp[k] = l
	return l
}
