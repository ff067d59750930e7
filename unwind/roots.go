package unwind

import (
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
)

// rootKind is what the walk knows of a frame's function.
type rootKind uint8

const (
	rootNone   rootKind = iota
	rootThread          // a thread's entry: step, but never past it
	rootGo              // a Go top frame: the walk ends here
)

// rootAt classifies the function holding lookup address pc of mapping m,
// by the extents of the thread-root functions in its module's symbol
// tables (found once per module).
func rootAt(m *target.Mapping, pc uint64) rootKind {
	if m == nil || m.Module == nil {
		return rootNone
	}
	vaddr := pc - m.Bias
	for _, r := range symbolize.RootRanges(m.Module) {
		if vaddr >= r.Start && vaddr < r.End {
			if r.Kind == symbolize.GoTopFrame {
				return rootGo
			}
			return rootThread
		}
	}
	return rootNone
}
