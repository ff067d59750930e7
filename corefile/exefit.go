package corefile

import (
	"debug/elf"
	"fmt"

	"github.com/rewindstack/rewind/elfobj"
)

// ExeFits reports whether the ELF file f can be the program a core ran,
// for a core that names no executable mapping (qemu-user writes no NT_FILE
// note, so no build-id or path says which file it was): f must be for the
// core's architecture, its entry point must be where the auxiliary vector
// says the program's was (at a page-aligned load bias, none for ET_EXEC),
// and each of its executable segments must lie in one of the core's
// segments there. In a core without an auxiliary vector (one cut short
// inside its notes), an ELF header with f's build-id must be in the core's
// memory instead. A nil error means f fits; the error says why not.
func (c *Core) ExeFits(f *elfobj.File) error {
	if f.Arch != c.Arch {
		return fmt.Errorf("it is for %v, the core for %v", f.Machine, c.Arch)
	}
	entry, ok := c.Auxv[AtEntry]
	if !ok {
		// No auxiliary vector (a core that lost its notes): an ELF
		// header with f's build-id in the core's memory says it is
		// there; without a build-id nothing can be compared.
		if len(f.BuildID) == 0 {
			return nil
		}
		if _, ok := c.biasOf(f); !ok {
			return fmt.Errorf("its build-id %x is in no ELF header the core holds", f.BuildID)
		}
		return nil
	}
	const page = 1 << 12
	bias := entry - f.Entry
	if f.Type == elf.ET_EXEC && bias != 0 || bias%page != 0 {
		return fmt.Errorf("its entry point is %#x, the core's program started at %#x", f.Entry, entry)
	}
	for _, l := range f.Loads {
		if l.Flags&elf.PF_X == 0 || l.Memsz == 0 {
			continue
		}
		lo, hi := l.Vaddr+bias, l.Vaddr+bias+l.Memsz
		start, end, ok := c.SegmentAt(lo)
		if !ok || start > lo || end < hi {
			return fmt.Errorf("its code would be at %#x-%#x, where the core has no mapping that holds it", lo, hi)
		}
	}
	return nil
}
