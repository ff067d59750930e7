package main

import (
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/internal/cachefile"
	"github.com/rewindstack/rewind/internal/fsafe"
	"github.com/rewindstack/rewind/internal/textesc"
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
			fmt.Fprintf(os.Stderr, "rewind: %s\n", textesc.String(n))
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

// maxGenInput bounds the file sframe gen copies: the copy is built in
// memory, twice (the output and its read-back check).
const maxGenInput = 1 << 30

// readInput reads the whole of a regular file named on the command line,
// up to maxGenInput bytes.
func readInput(path string) ([]byte, error) {
	fh, st, err := fsafe.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	if st.Size() > maxGenInput {
		return nil, fmt.Errorf("%s: %d bytes: rewind copies files of at most %d bytes (1 GiB) (--separate writes only the section)", path, st.Size(), maxGenInput)
	}
	b := make([]byte, st.Size())
	if _, err := io.ReadFull(fh, b); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}
