package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/rewindstack/rewind/debuginfod"
	"github.com/rewindstack/rewind/locate"
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
