package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/rewindstack/rewind/internal/cachefile"
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
		warn(fmt.Sprintf("%v; running without the cache", err))
		return ""
	}
	return dir
}

// printCacheNotes reports what the caches did: refused files or
// directories always, rebuilt (corrupt, mismatched) or unsaved entries
// with --stats.
func printCacheNotes(stats bool) {
	untrusted, other := cachefile.TakeNotes()
	for _, n := range untrusted {
		warn(n)
	}
	if stats {
		for _, n := range other {
			fmt.Fprintf(os.Stderr, "rewind: %s\n", n)
		}
	}
}

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
