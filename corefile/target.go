package corefile

import (
	"bytes"
	"debug/elf"
	"fmt"
	"path/filepath"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/target"
)

// Target makes a target of the core: its threads over its memory and its
// NT_FILE mappings, plus the vDSO, which NT_FILE does not list (it is not
// a file) but the kernel dumps and the auxiliary vector locates. exe, when
// not empty, replaces the executable path the core names (the binary
// moved, or the core came from another machine); a relative exe is taken
// from the current directory. objs may be nil.
//
// libs are more files to place when the core has no NT_FILE entry for
// them (a core cut short inside its notes lost NT_FILE): each is mapped
// where the core's memory holds an ELF header with its build-id.
func (c *Core) Target(objs *target.Objects, exe string, libs ...string) (*target.Target, error) {
	if len(c.Threads) == 0 {
		if at, _, cut := c.NotesCut(); cut {
			return nil, fmt.Errorf("%s: the core is cut short at file offset %#x, inside its notes and before any thread's registers (NT_PRSTATUS)", c.Path, at)
		}
		return nil, fmt.Errorf("%s: core has no threads (no NT_PRSTATUS notes)", c.Path)
	}
	if exe != "" {
		// Mappings name files by absolute path; a relative one would be
		// taken for a special mapping and never opened.
		abs, err := filepath.Abs(exe)
		if err != nil {
			return nil, err
		}
		exe = abs
	}
	maps := make([]target.Mapping, 0, len(c.Mappings)+1)
	named := false
	for _, m := range c.Mappings {
		if exe != "" && m.Path == c.Exe {
			m.Path = exe
			named = true
		}
		maps = append(maps, m)
	}
	if exe != "" && !named {
		// No NT_FILE entry names the executable (qemu-user's cores have
		// no NT_FILE at all): place its code where the auxiliary vector
		// says the program's entry point was, or else where its ELF
		// header is.
		maps = append(maps, c.exeMappings(exe)...)
	}
	for _, lib := range libs {
		if abs, err := filepath.Abs(lib); err == nil && abs != exe && !c.names(abs) {
			maps = append(maps, c.PlaceByBuildID(abs)...)
		}
	}
	if base, ok := c.Auxv[AtSysinfoEhdr]; ok && base != 0 {
		if start, end, ok := c.SegmentAt(base); ok {
			maps = append(maps, target.Mapping{Start: start, End: end, Path: target.VDSOPath, Perms: c.permsAt(start)})
		}
	}
	ctxs := make([]target.Context, 0, len(c.Threads))
	for _, th := range c.Threads {
		ctx := target.Thread(th.TID, "", th.Regs)
		ctx.TP = th.TP
		ctxs = append(ctxs, ctx)
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

// exeMappings returns mappings of the executable segments of the file exe
// at the load bias the core's AT_ENTRY implies (the runtime entry point
// minus the file's); in a core without AT_ENTRY, where PlaceByBuildID
// finds it; none when exe cannot be read.
func (c *Core) exeMappings(exe string) []target.Mapping {
	entry, ok := c.Auxv[AtEntry]
	if !ok {
		return c.PlaceByBuildID(exe)
	}
	f, err := elfobj.Open(exe)
	if err != nil {
		return nil
	}
	defer f.Close()
	return codeMappings(f, exe, entry-f.Entry)
}

// names reports whether an NT_FILE entry maps path.
func (c *Core) names(path string) bool {
	for i := range c.Mappings {
		if c.Mappings[i].Path == path {
			return true
		}
	}
	return false
}

// PlaceByBuildID returns mappings of the executable segments of the ELF
// file at path where the core's memory holds an ELF header with the
// file's build-id at a page-aligned load bias (kernel cores and gcore dump
// the first page of every ELF mapping), or none when the file has no
// build-id, cannot be read, or is nowhere in the core. It places files in
// cores that say nothing of them: no NT_FILE entry (qemu-user, or a
// truncated core that lost its notes).
func (c *Core) PlaceByBuildID(path string) []target.Mapping {
	f, err := elfobj.Open(path)
	if err != nil || len(f.BuildID) == 0 {
		if err == nil {
			f.Close()
		}
		return nil
	}
	defer f.Close()
	bias, ok := c.biasOf(f)
	if !ok {
		return nil
	}
	return codeMappings(f, path, bias)
}

// biasOf finds the load bias of f from an ELF header with its build-id at
// the start of one of the core's segments.
func (c *Core) biasOf(f *elfobj.File) (uint64, bool) {
	const page = 1 << 12
	var first uint64
	found := false
	for _, l := range f.Loads {
		if l.Offset == 0 && l.Memsz != 0 {
			first, found = l.Vaddr&^(page-1), true
			break
		}
	}
	if !found {
		return 0, false
	}
	for i := range c.segs {
		s := &c.segs[i]
		if id := c.buildIDAt(s.vaddr, s.vaddr+s.memsz); id != nil && bytes.Equal(id, f.BuildID) {
			bias := s.vaddr - first
			if f.Type == elf.ET_EXEC && bias != 0 || bias%page != 0 {
				continue
			}
			return bias, true
		}
	}
	return 0, false
}

// codeMappings returns mappings of f's executable segments at load bias.
func codeMappings(f *elfobj.File, path string, bias uint64) []target.Mapping {
	const page = 1 << 12
	var out []target.Mapping
	for _, l := range f.Loads {
		if l.Flags&elf.PF_X == 0 || l.Memsz == 0 {
			continue
		}
		start := (l.Vaddr + bias) &^ (page - 1)
		end := (l.Vaddr + bias + l.Memsz + page - 1) &^ (page - 1)
		out = append(out, target.Mapping{Start: start, End: end, Offset: l.Offset &^ (page - 1), Path: path, Perms: "r-xp"})
	}
	return out
}
