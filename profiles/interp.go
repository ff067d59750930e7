package profiles

import (
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
)

// interpKey identifies an interpreted frame's location.
type interpKey struct {
	function, file, method string
	line                   int
}

// sampleStack is a sample's user locations (leaf first) as the native
// side of target.Splice: an entry is a location whose physical function
// (its last line) is the runtime's entry; samples carry no stack
// pointers, so no anchor is held.
type sampleStack []*Location

func (s sampleStack) Len() int { return len(s) }

func (s sampleStack) IsEntry(i int, fn string) bool {
	return s[i].Lines[len(s[i].Lines)-1].Function == fn
}

func (s sampleStack) Holding(uint64) int { return -1 }

func (s sampleStack) PhysPC(i int) uint64 { return s[i].Addr }

// spliceInterp places a sample's interpreted frames in its user
// locations by target.Splice, as dumps place them, except that the
// frames of activations without an entry location (a walk cut short) go
// before the outermost one, and are dropped when there is none (the
// entry's symbol unknown): the native stack as it is keeps its root.
func (b *Builder) spliceInterp(locs []*Location, interp []target.InterpStack) []*Location {
	out := make([]*Location, 0, len(locs)+len(interp))
	target.Splice(interp, sampleStack(locs), target.SpliceOptions{Outermost: true},
		func(i int) { out = append(out, locs[i]) },
		func(f *target.InterpFrame) { out = append(out, b.interpLoc(f)) })
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
