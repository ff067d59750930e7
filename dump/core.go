package dump

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rewindstack/rewind/corefile"
	"github.com/rewindstack/rewind/fibers"
	"github.com/rewindstack/rewind/locate"
	"github.com/rewindstack/rewind/output"
	"github.com/rewindstack/rewind/stacks"
	"github.com/rewindstack/rewind/target"
)

// Core dumps every thread of the ELF core file at path, with the fibers
// and runtimes' frames opt asks for. When the core is damaged (truncated,
// its notes cut) the report of what it holds comes with an error saying
// so.
func Core(path string, opt Options) (*output.Report, error) {
	p := newPipe(opt)
	defer p.finish()
	c, err := corefile.Open(path)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	cs, err := p.setupCore(c)
	if err != nil {
		return nil, err
	}
	tg, err := c.Target(p.objs, cs.exe, cs.unnamedFiles(c)...)
	if err != nil {
		return nil, err
	}
	p.mark("open")
	specs := p.opt.Fibers
	var found []fibers.Spec
	if p.opt.FiberScan {
		var st fibers.ScanStats
		if found, st, err = fibers.ScanCore(tg, c.AnonymousSegments(), p.opt.FiberScanLimits); err != nil {
			return nil, err
		}
		if n := st.Note(); n != "" {
			p.warn(n)
		}
		specs = append(slices.Clip(specs), found...)
	}
	p.preload(tg) // on the other core, while unwinding
	if p.anyFibers() {
		tg.Contexts = append(tg.Contexts, fibers.FromCore(tg, specs, p.opt.AllFibers, p.warn)...)
	}
	for _, r := range p.runtimes() {
		r.Core(tg, p.warn)
	}
	walks := dropPhantoms(stacks.Walk(tg, p.stacksOptions()), found)
	p.mark("unwind")
	p.warnUnreadable(tg.Space, walks)
	rep := stacks.Report(tg, walks, p.sym)
	p.mark("symbolize")
	return rep, cs.damaged
}

// stacksOptions are the options of the dump's walks.
func (p *pipe) stacksOptions() stacks.Options {
	return stacks.Options{Unwinder: p.u, Threads: p.opt.Threads}
}

// dropPhantoms removes from walks the stale fibers of the contexts the
// fiber scan found (fibers.Phantoms), keeping the others in order.
func dropPhantoms(walks []stacks.Walked, found []fibers.Spec) []stacks.Walked {
	if len(found) == 0 {
		return walks
	}
	in := make([]fibers.Walk, len(walks))
	for i := range walks {
		in[i] = fibers.Walk{Fiber: walks[i].Fiber, Stack: &walks[i].Stack}
	}
	drop := fibers.Phantoms(in, found)
	if drop == nil {
		return walks
	}
	out := walks[:0:0]
	for i := range walks {
		if !drop[i] {
			out = append(out, walks[i])
		}
	}
	return out
}

// coreSetup is what setupCore made of a core.
type coreSetup struct {
	// exe is the executable path for Core.Target ("": the core's own).
	exe string
	// res is the lookup chain (nil without Options.Resolver).
	res *locate.Resolver
	// damaged says the core is truncated; said after the dump.
	damaged error
}

// setupCore wires the lookup chain into a core's reads, the objects and
// the symbolizer, and chooses the executable of a core that names none.
func (p *pipe) setupCore(c *corefile.Core) (*coreSetup, error) {
	cs := &coreSetup{}
	if p.opt.Resolver == nil {
		cs.damaged = damage(c, true)
		return cs, nil
	}
	r, err := p.opt.Resolver(c.Exe)
	if err != nil {
		return nil, err
	}
	cs.res, cs.damaged = r, damage(c, len(r.Files) == 0)
	r.ExpectIDs(c.BuildIDs())
	r.Prefetch(true)
	p.objs.Open = r.Open
	c.SetFileOpener(r.OpenReader)
	p.sym.FindDebug = r.DebugFile
	if !c.ExeMapped() {
		// No NT_FILE entry names the executable (qemu-user): the core
		// places the file chosen here by AT_ENTRY.
		cs.exe = p.placeExe(c, r)
	}
	return cs, nil
}

// damage returns the error saying how core c is truncated, nil when it
// is whole; noFiles: no files of the core's are given (the hint says how).
func damage(c *corefile.Core, noFiles bool) error {
	want, have, bad := c.Truncated()
	if !bad {
		return nil
	}
	err := fmt.Errorf("%s is truncated: %d bytes, its segments need %d (expected %d more); stacks needing the missing memory are cut short", c.Path, have, want, want-have)
	if at, missing, cut := c.NotesCut(); cut {
		lack := ""
		if len(missing) > 0 {
			lack = "; also missing: " + strings.Join(missing, ", ")
		}
		if len(c.Mappings) == 0 && noFiles {
			lack += " (give the program and its libraries with --exe: each is placed where the core holds its ELF header)"
		}
		err = fmt.Errorf("%w; its notes are cut at file offset %#x: %d threads' registers read, any thread noted after them is missing%s", err, at, len(c.Threads), lack)
	}
	return err
}

// unnamedFiles returns the user's files to be placed by their build-ids
// when the core has no NT_FILE note to name them (qemu-user's cores, and
// cores cut short inside their notes): libraries as well as the program.
func (cs *coreSetup) unnamedFiles(c *corefile.Core) []string {
	if len(c.Mappings) > 0 || cs.res == nil {
		return nil
	}
	return cs.res.UserFiles()
}

// coreExe returns the local file that stands for the core's executable:
// the file the lookup chain chose for it, or "" when that is the path the
// core names.
func (cs *coreSetup) coreExe(c *corefile.Core, objs *target.Objects) string {
	if cs.exe != "" || c.Exe == "" || cs.res == nil {
		return cs.exe
	}
	if _, err := objs.Open(c.Exe); err != nil {
		return ""
	}
	if p := cs.res.Chosen(c.Exe); p != c.Exe {
		return p
	}
	return ""
}
