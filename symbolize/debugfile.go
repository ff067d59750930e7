package symbolize

import (
	"bytes"
	"os"
	"path/filepath"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/target"
)

// DefaultDebugDir is where distributions install separate debug files
// (Debian's *-dbg and *-dbgsym packages, Fedora's debuginfo).
const DefaultDebugDir = "/usr/lib/debug"

// findDebugFile looks for the separate debug file of f, as gdb and elfutils
// do: by build-id (DIR/.build-id/xx/rest.debug), then by .gnu_debuglink
// next to the object, in its .debug subdirectory, and under DIR. A
// candidate whose build-id differs from f's is rejected.
func findDebugFile(f *elfobj.File, dirs []string) *elfobj.File {
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
		df, err := elfobj.Open(c)
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

// SymbolFile returns the file whose symbol table names m's code: its
// separate debug file when one is installed (it has the full .symtab with
// local functions, which stripped libraries lack), else the object itself.
// The result is nil when m could not be opened.
func (s *Symbolizer) SymbolFile(m *target.Module) *elfobj.File {
	if m == nil || m.File == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := s.symFiles[m]; ok {
		return f
	}
	var f *elfobj.File
	if s.DebugDirs == nil {
		f = moduleDebugFile(m) // opened once per module, shared
	} else {
		f = findDebugFile(m.File, s.DebugDirs)
	}
	if f == nil {
		f = m.File
	}
	if s.symFiles == nil {
		s.symFiles = map[*target.Module]*elfobj.File{}
	}
	s.symFiles[m] = f
	return f
}
