package stacks

import (
	"fmt"

	"github.com/rewindstack/rewind/corefile"
	"github.com/rewindstack/rewind/unwind"
)

// FromCore makes a target of an ELF core file. exe, when not empty,
// replaces the executable path recorded in the core (useful when the binary
// moved, or the core came from another machine).
func FromCore(c *corefile.Core, exe string, objs *unwind.Objects) (*Target, error) {
	if len(c.Threads) == 0 {
		return nil, fmt.Errorf("%s: core has no threads (no NT_PRSTATUS notes)", c.Path)
	}
	maps := make([]unwind.Mapping, 0, len(c.Mappings))
	for _, m := range c.Mappings {
		path := m.Path
		if exe != "" && path == c.Exe {
			path = exe
		}
		maps = append(maps, unwind.Mapping{Start: m.Start, End: m.End, Offset: m.Offset, Path: path})
	}
	// The vDSO is not a file, so NT_FILE does not list it; the kernel dumps
	// its pages, and the auxiliary vector says where it is.
	if base, ok := c.Auxv[corefile.AtSysinfoEhdr]; ok && base != 0 {
		if start, end, ok := c.SegmentAt(base); ok {
			if m, err := VDSOMapping(c, start, end, objs); err == nil {
				maps = append(maps, m)
			}
		}
	}
	t := &Target{
		PID:    c.PID,
		Source: "core " + c.Path,
		Mem:    c,
		Space:  unwind.NewAddressSpace(maps, objs),
	}
	for _, th := range c.Threads {
		t.Threads = append(t.Threads, Thread{TID: th.TID, Regs: th.Regs})
	}
	return t, nil
}
