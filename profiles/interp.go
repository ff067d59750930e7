package profiles

import (
	"math"

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
// (its last line) is the runtime's entry. sps, when set, are the
// locations' stack pointers (a walk of a stack copy: one location per
// frame), which place anchored activations without symbols; the kernel
// walk's samples carry none.
type sampleStack struct {
	locs []*Location
	sps  []uint64
}

func (s sampleStack) Len() int { return len(s.locs) }

func (s sampleStack) IsEntry(i int, fn string) bool {
	return s.locs[i].Lines[len(s.locs[i].Lines)-1].Function == fn
}

// Holding returns the location whose frame's stack holds addr: between
// its stack pointer and its caller's (the outermost's reaches up to the
// stack's top).
func (s sampleStack) Holding(addr uint64) int {
	if len(s.sps) != len(s.locs) {
		return -1
	}
	for i, lo := range s.sps {
		hi := uint64(math.MaxUint64)
		if i+1 < len(s.sps) {
			hi = s.sps[i+1]
		}
		if lo != 0 && lo <= addr && addr < hi {
			return i
		}
	}
	return -1
}

func (s sampleStack) PhysPC(i int) uint64 { return s.locs[i].Addr }

// spliceInterp places a sample's interpreted frames in its user
// locations by target.Splice, as dumps place them, except that the
// frames of activations without an entry location (a walk cut short) go
// before the outermost one, and are dropped when there is none (the
// entry's symbol unknown, and no anchor placed them): the native stack
// as it is keeps its root. sps are the locations' stack pointers, nil
// when unknown.
func (b *Builder) spliceInterp(locs []*Location, sps []uint64, interp []target.InterpStack) []*Location {
	out := make([]*Location, 0, len(locs)+len(interp))
	target.Splice(interp, sampleStack{locs, sps}, target.SpliceOptions{Outermost: true},
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
	l.Interpreted = true
	if b.interp == nil {
		b.interp = map[interpKey]*Location{}
	}
	b.interp[k] = l
	return l
}
