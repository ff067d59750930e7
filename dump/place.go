package dump

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/rewindstack/rewind/corefile"
	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/internal/fileerr"
	"github.com/rewindstack/rewind/locate"
	"github.com/rewindstack/rewind/stacks"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
)

// placeExe picks the executable of a core that names none (qemu-user
// writes no NT_FILE note, so neither a path nor a build-id says which
// file it ran) among the user's files: one that fits the core
// (corefile.Core.ExeFits), the one named as the core's process first. It
// warns when none is given or none fits; with r.Force it then uses the
// first file given anyway.
func (p *pipe) placeExe(c *corefile.Core, r *locate.Resolver) string {
	files := r.UserFiles()
	if len(files) == 0 {
		p.warn(fmt.Sprintf("%s names no executable (no NT_FILE note, as qemu-user writes): frames in the program print as addresses; give it with --exe", c.Path))
		return ""
	}
	var fit, why []string
	for _, f := range files {
		ef, err := elfobj.Open(f)
		if err == nil {
			err = c.ExeFits(ef)
			ef.Close()
		}
		switch {
		case err == nil:
			fit = append(fit, f)
		case slices.Contains(r.Files, f) || !notELF(err):
			// Say why a file the user named, or an ELF file found in
			// a directory, was passed over; not every file of a
			// directory.
			why = append(why, fmt.Sprintf("%s: %v", f, err))
		}
	}
	if len(fit) > 0 {
		return p.chooseExe(c, fit)
	}
	msg := fmt.Sprintf("%s names no executable (qemu-user's core) and no --exe file fits it", c.Path)
	if len(why) > 0 {
		msg += " (" + strings.Join(why, "; ") + ")"
	}
	if r.Force {
		if st, err := os.Stat(r.Files[0]); err == nil && st.Mode().IsRegular() {
			p.warn(msg + ": using " + r.Files[0] + " anyway (--force)")
			return r.Files[0]
		}
	}
	p.warn(msg + ": frames in the program print as addresses (--force uses the first file given)")
	return ""
}

// chooseExe picks among the files that fit core c as its executable (see
// placeExe): the one named as the core's process, else the first.
func (p *pipe) chooseExe(c *corefile.Core, fit []string) string {
	chosen, named := fit[0], false
	for _, f := range fit {
		if b := filepath.Base(f); b == c.Name || len(c.Name) == 15 && strings.HasPrefix(b, c.Name) {
			chosen, named = f, true
			break
		}
	}
	_, entry := c.Auxv[corefile.AtEntry]
	if len(fit) > 1 && !entry && named {
		// A core that lost its notes has no entry point to tell the
		// program from the libraries given with it: each is placed by
		// its build-id (Target's libs), the program by its name.
		return chosen
	}
	if len(fit) > 1 {
		// Only the entry point and the layout were compared: two
		// builds of one program can both fit.
		p.warn(fmt.Sprintf("%s names no executable (qemu-user's core) and %d --exe files fit it (%s): using %s; give only the right one with --exe",
			c.Path, len(fit), strings.Join(fit, ", "), chosen))
	}
	return chosen
}

// preload has the symbolizer start reading, in the background, what the
// frames will need, beginning with each thread's current PC.
func (p *pipe) preload(tg *target.Target) {
	var starts []symbolize.Want
	for i := range tg.Contexts {
		c := &tg.Contexts[i]
		if pc, ok := c.Regs.PC(); ok && c.Err == nil {
			starts = append(starts, symbolize.Want{Map: tg.Space.Find(pc), PC: pc, Exact: true})
		}
	}
	p.sym.Preload(starts)
}

// warnUnreadable tells of mapped objects that could not be opened: their
// frames print as addresses only. A file that is no ELF object at all, in
// a mapping whose permissions are unknown (gcore leaves read-only file
// mappings out of the core, so a locale archive looks like code), is
// data: it is said only when a frame of walks lands in it.
func (p *pipe) warnUnreadable(space *target.AddressSpace, walks []stacks.Walked) {
	hit := map[string]bool{}
	for i := range walks {
		for _, f := range walks[i].Stack.Frames {
			if f.Map != nil {
				hit[f.Map.Path] = true
			}
		}
	}
	seen := map[string]bool{}
	for _, m := range space.Mappings() {
		if m.Module == nil || m.Module.File != nil || seen[m.Path] {
			continue
		}
		seen[m.Path] = true
		if m.Perms == "" && notELF(m.Module.Err) && !hit[m.Path] {
			continue
		}
		p.warn(fmt.Sprintf("%v (frames in it print as addresses)", m.Module.Err))
	}
}

// notELF reports whether err says a file is not an ELF object at all (its
// header is not one), rather than missing, unreadable or damaged.
func notELF(err error) bool {
	var fe *fileerr.FormatError
	return errors.As(err, &fe) && fe.Pkg == "elfobj" && fe.Section == "ELF header" && fe.Offset == 0
}
