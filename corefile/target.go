package corefile

import (
	"fmt"

	"github.com/rewindstack/rewind/target"
)

// Target makes a target of the core: its threads over its memory and its
// NT_FILE mappings, plus the vDSO, which NT_FILE does not list (it is not
// a file) but the kernel dumps and the auxiliary vector locates. exe, when
// not empty, replaces the executable path the core names (the binary
// moved, or the core came from another machine). objs may be nil.
func (c *Core) Target(objs *target.Objects, exe string) (*target.Target, error) {
	if len(c.Threads) == 0 {
		return nil, fmt.Errorf("%s: core has no threads (no NT_PRSTATUS notes)", c.Path)
	}
	maps := make([]target.Mapping, 0, len(c.Mappings)+1)
	for _, m := range c.Mappings {
		if exe != "" && m.Path == c.Exe {
			m.Path = exe
		}
		maps = append(maps, m)
	}
	if base, ok := c.Auxv[AtSysinfoEhdr]; ok && base != 0 {
		if start, end, ok := c.SegmentAt(base); ok {
			maps = append(maps, target.Mapping{Start: start, End: end, Path: target.VDSOPath, Perms: c.permsAt(start)})
		}
	}
	ctxs := make([]target.Context, 0, len(c.Threads))
	for _, th := range c.Threads {
		ctxs = append(ctxs, target.Thread(th.TID, "", th.Regs))
	}
	return target.New(target.Config{
		PID:      c.PID,
		Source:   "core " + c.Path,
		Arch:     c.Arch,
		Mem:      c,
		Mappings: maps,
		Objects:  objs,
		Contexts: ctxs,
	}), nil
}
