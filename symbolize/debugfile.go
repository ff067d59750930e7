package symbolize

import (
	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/target"
)

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
		f = m.DebugFile() // opened once per module, shared
	} else {
		f = elfobj.FindDebugFile(m.File, s.DebugDirs)
	}
	if f == nil && s.FindDebug != nil {
		f = s.FindDebug(m.File)
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
