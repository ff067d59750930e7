package runtimes

import (
	"debug/elf"

	"github.com/rewindstack/rewind/target"
)

// LoadBias is the load bias of the object f mapped from path: from the
// mapping of its first PT_LOAD segment's file offset, else the bias the
// target computed for the object's code (a core's notes cut short); ok
// is false when neither is known.
func LoadBias(f *elf.File, maps []target.Mapping, path string) (bias uint64, ok bool) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		for i := range maps {
			m := &maps[i]
			if m.Path == path && m.Offset <= p.Off && p.Off < m.Offset+(m.End-m.Start) {
				// The byte at file offset p.Off is at p.Vaddr in the object.
				return m.Start + (p.Off - m.Offset) - p.Vaddr, true
			}
		}
		break
	}
	for i := range maps {
		if m := &maps[i]; m.Path == path && m.Module != nil {
			return m.Bias, true
		}
	}
	return 0, false
}
