package elfobj

import (
	"bytes"
	"os"
	"path/filepath"
)

// DefaultDebugDir is where distributions install separate debug files
// (Debian's *-dbg and *-dbgsym packages, Fedora's debuginfo).
const DefaultDebugDir = "/usr/lib/debug"

// FindDebugFile looks for the separate debug file of f, as gdb and elfutils
// do: by build-id (DIR/.build-id/xx/rest.debug), then by .gnu_debuglink
// next to the object, in its .debug subdirectory, and under DIR. A
// candidate whose build-id differs from f's is rejected; nil when none
// is found.
func FindDebugFile(f *File, dirs []string) *File {
	var cands []string
	if id := f.BuildIDHex(); len(id) > 2 {
		for _, d := range dirs {
			cands = append(cands, filepath.Join(d, ".build-id", id[:2], id[2:]+".debug"))
		}
	}
	if f.DebugLink != "" {
		dir := filepath.Dir(f.Path)
		cands = append(cands, filepath.Join(dir, f.DebugLink), filepath.Join(dir, ".debug", f.DebugLink))
		for _, d := range dirs {
			cands = append(cands, filepath.Join(d, dir, f.DebugLink))
		}
	}
	for _, c := range cands {
		if c == f.Path {
			continue
		}
		if _, err := os.Stat(c); err != nil {
			continue
		}
		df, err := Open(c)
		if err != nil {
			continue
		}
		if f.BuildID != nil && df.BuildID != nil && !bytes.Equal(f.BuildID, df.BuildID) {
			df.Close()
			continue
		}
		return df
	}
	return nil
}
