package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/rewindstack/rewind/corefile"
	"github.com/rewindstack/rewind/debuginfod"
	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/locate"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
)

// pathsFlag is a repeatable flag of paths.
type pathsFlag []string

func (p *pathsFlag) String() string { return strings.Join(*p, ",") }
func (p *pathsFlag) Set(s string) error {
	if s == "" {
		return fmt.Errorf("empty path")
	}
	*p = append(*p, s)
	return nil
}

// locateFlags are the flags that say where a core's or recording's files
// are when they are not at the paths it names.
type locateFlags struct {
	exes     pathsFlag
	sysroot  *string
	debugDir pathsFlag
	offline  *bool
	force    *bool
	// inputErr is reported after the output: the input is damaged.
	inputErr error
	// res is the lookup chain setupCore built.
	res *locate.Resolver
}

const locateHelp = `
Files from another machine: --exe FILE|DIR (repeatable) gives files or
directories matched to the mappings by build-id and by name; --sysroot DIR
looks mapped paths up under DIR first; --debug-dir DIR adds a directory
of separate debug files (.build-id/xx/rest.debug, debuglink layouts);
perf's build-id cache ($PERF_BUILDID_DIR or ~/.debug) is searched; and
when DEBUGINFOD_URLS is set, missing executables and debug information
are fetched from those servers by build-id (cache: $DEBUGINFOD_CACHE_PATH
or ~/.cache/debuginfod_client, timeout: DEBUGINFOD_TIMEOUT seconds) unless
--offline.`

func addLocateFlags(fs *flag.FlagSet, withExe bool) *locateFlags {
	lf := &locateFlags{}
	if withExe {
		fs.Var(&lf.exes, "exe", "with --core: the executable, or another file or a `PATH` to search, for the core's mappings (repeatable; matched by build-id and name)")
	}
	lf.sysroot = fs.String("sysroot", "", "look the mapped files up under `DIR` first")
	fs.Var(&lf.debugDir, "debug-dir", "search `DIR` for separate debug files, as gdb's debug-file-directory (repeatable)")
	lf.offline = fs.Bool("offline", false, "never use the network (debuginfod answers from its cache only)")
	lf.force = fs.Bool("force", false, "use a file given with --exe or --sysroot, or found at the recorded path, even when its build-id differs from the recorded one")
	return lf
}

// resolver builds the lookup chain; exe is the path the source gives the
// executable.
func (lf *locateFlags) resolver(exe string) (*locate.Resolver, error) {
	r := &locate.Resolver{Exe: exe, Force: *lf.force, Warn: warn, BuildIDDirs: locate.PerfBuildIDDirs()}
	for _, e := range lf.exes {
		abs, err := filepath.Abs(e)
		if err != nil {
			return nil, err
		}
		if _, err := os.Stat(abs); err != nil {
			return nil, fmt.Errorf("--exe: %v", err)
		}
		r.Files = append(r.Files, abs)
	}
	if *lf.sysroot != "" {
		abs, err := filepath.Abs(*lf.sysroot)
		if err != nil {
			return nil, err
		}
		if st, err := os.Stat(abs); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("--sysroot %s: not a directory", *lf.sysroot)
		}
		r.Sysroot = abs
	}
	for _, d := range lf.debugDir {
		abs, err := filepath.Abs(d)
		if err != nil {
			return nil, err
		}
		r.DebugDirs = append(r.DebugDirs, abs)
	}
	if c := debuginfod.FromEnv(*lf.offline); c != nil {
		c.Warn = warn
		c.Progress = os.Stderr
		r.Debuginfod = c
	}
	return r, nil
}

// unnamedFiles returns the files given with --exe to be placed by their
// build-ids when the core has no NT_FILE note to name them (qemu-user's
// cores, and cores cut short inside their notes): libraries as well as
// the program.
func (lf *locateFlags) unnamedFiles(c *corefile.Core) []string {
	if len(c.Mappings) > 0 || lf.res == nil {
		return nil
	}
	return lf.res.UserFiles()
}

// setupCore wires the lookup chain into a core's reads, the objects and
// the symbolizer, and returns the executable path for Core.Target.
func (lf *locateFlags) setupCore(c *corefile.Core, objs *target.Objects, sym *symbolize.Symbolizer) (string, error) {
	if want, have, bad := c.Truncated(); bad {
		// Said once, after the dump, as the command's error: the exit
		// status says the input was damaged.
		lf.inputErr = fmt.Errorf("%s is truncated: %d bytes, its segments need %d (expected %d more); stacks needing the missing memory are cut short", c.Path, have, want, want-have)
		if at, missing, cut := c.NotesCut(); cut {
			lack := ""
			if len(missing) > 0 {
				lack = "; also missing: " + strings.Join(missing, ", ")
			}
			if len(c.Mappings) == 0 && len(lf.exes) == 0 {
				lack += " (give the program and its libraries with --exe: each is placed where the core holds its ELF header)"
			}
			lf.inputErr = fmt.Errorf("%w; its notes are cut at file offset %#x: %d threads' registers read, any thread noted after them is missing%s", lf.inputErr, at, len(c.Threads), lack)
		}
	}
	r, err := lf.resolver(c.Exe)
	if err != nil {
		return "", err
	}
	lf.res = r
	r.ExpectIDs(c.BuildIDs())
	r.Prefetch(true)
	objs.Open = r.Open
	c.SetFileOpener(r.OpenReader)
	sym.FindDebug = r.DebugFile
	exe := ""
	if !c.ExeMapped() {
		// No NT_FILE entry names the executable (qemu-user): the core
		// places the file chosen here by AT_ENTRY.
		exe = lf.placeExe(c, r)
	}
	return exe, nil
}

// placeExe picks the executable of a core that names none (qemu-user
// writes no NT_FILE note, so neither a path nor a build-id says which
// file it ran) among the user's files: one that fits the core
// (corefile.Core.ExeFits), the one named as the core's process first. It
// warns when none is given or none fits; --force then uses the first file
// given anyway.
func (lf *locateFlags) placeExe(c *corefile.Core, r *locate.Resolver) string {
	files := r.UserFiles()
	if len(files) == 0 {
		warn(fmt.Sprintf("%s names no executable (no NT_FILE note, as qemu-user writes): frames in the program print as addresses; give it with --exe", c.Path))
		return ""
	}
	var fit, why []string
	for _, p := range files {
		f, err := elfobj.Open(p)
		if err == nil {
			err = c.ExeFits(f)
			f.Close()
		}
		switch {
		case err == nil:
			fit = append(fit, p)
		case slices.Contains(r.Files, p) || !notELF(err):
			// Say why a file the user named, or an ELF file found in
			// a directory, was passed over; not every file of a
			// directory.
			why = append(why, fmt.Sprintf("%s: %v", p, err))
		}
	}
	if len(fit) > 0 {
		chosen, named := fit[0], false
		for _, p := range fit {
			if b := filepath.Base(p); b == c.Name || len(c.Name) == 15 && strings.HasPrefix(b, c.Name) {
				chosen, named = p, true
				break
			}
		}
		_, entry := c.Auxv[corefile.AtEntry]
		if len(fit) > 1 && !entry && named {
			// A core that lost its notes has no entry point to tell the
			// program from the libraries given with it: each is placed
			// by its build-id (Target's libs), the program by its name.
			return chosen
		}
		if len(fit) > 1 {
			// Only the entry point and the layout were compared: two
			// builds of one program can both fit.
			warn(fmt.Sprintf("%s names no executable (qemu-user's core) and %d --exe files fit it (%s): using %s; give only the right one with --exe",
				c.Path, len(fit), strings.Join(fit, ", "), chosen))
		}
		return chosen
	}
	msg := fmt.Sprintf("%s names no executable (qemu-user's core) and no --exe file fits it", c.Path)
	if len(why) > 0 {
		msg += " (" + strings.Join(why, "; ") + ")"
	}
	if *lf.force {
		if st, err := os.Stat(r.Files[0]); err == nil && st.Mode().IsRegular() {
			warn(msg + ": using " + r.Files[0] + " anyway (--force)")
			return r.Files[0]
		}
	}
	warn(msg + ": frames in the program print as addresses (--force uses the first file given)")
	return ""
}

// coreExe returns the local file that stands for the core's executable
// (after setupCore): the file the lookup chain chose for it, or "" when
// that is the path the core names.
func (lf *locateFlags) coreExe(c *corefile.Core, objs *target.Objects, exe string) string {
	if exe != "" || c.Exe == "" || lf.res == nil {
		return exe
	}
	if _, err := objs.Open(c.Exe); err != nil {
		return ""
	}
	if p := lf.res.Chosen(c.Exe); p != c.Exe {
		return p
	}
	return ""
}
