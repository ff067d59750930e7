package main

import (
	"debug/elf"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/internal/cachefile"
	"github.com/rewindstack/rewind/internal/fsafe"
)

// cacheDir returns the persistent cache directory commands use, or ""
// when disabled or refused: a directory of another user, or one others may
// write, is not used (with a warning saying why), since whoever can write
// the cache decides what rewind prints.
func cacheDir(disabled bool) string {
	if disabled {
		return ""
	}
	dir := cachefile.Dir()
	if dir == "" {
		return ""
	}
	if err := cachefile.CheckRoot(dir); err != nil {
		if !cacheRefusalSaid { // (record asks twice when BPF does not load)
			cacheRefusalSaid = true
			warn(fmt.Sprintf("%v; running without the cache", err))
		}
		return ""
	}
	elfobj.CacheSymbols(dir)
	return dir
}

// cacheRefusalSaid is set once cacheDir has said why it runs without the
// cache.
var cacheRefusalSaid bool

// profileTitle is the flame graph's title: --title when given, else def,
// which names the command only: arguments may hold secrets
// (--password=…) and the file may be shared.
func profileTitle(pf *profileFlags, def string) string {
	if pf.title != nil && *pf.title != "" {
		return *pf.title
	}
	return def
}

// recordTitle is the default title of a recording: the profiled command's
// name without its arguments, or its PID.
func recordTitle(pf *profileFlags, pid int, cmdArgs []string) string {
	def := "rewind record"
	switch {
	case pid != 0:
		def += " -p " + strconv.Itoa(pid)
	case len(cmdArgs) > 0:
		def += " " + filepath.Base(cmdArgs[0])
	}
	return profileTitle(pf, def)
}

// openELF opens a file named on the command line with debug/elf, refusing
// FIFOs and devices before anything could block on them.
func openELF(path string) (*elf.File, error) {
	// elfobj checks the headers first, so that a malformed file gets an
	// error naming the header and offset, not debug/elf's bare "EOF".
	of, err := elfobj.Open(path)
	if err != nil {
		return nil, err
	}
	of.Close()
	fh, _, err := fsafe.Open(path)
	if err != nil {
		return nil, err
	}
	f, err := elf.NewFile(fh)
	if err != nil {
		fh.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}
