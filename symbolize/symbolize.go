// Package symbolize turns unwound frames into names: function and offset
// from the object's symbol tables (or its separate debug file's, found by
// build-id or .gnu_debuglink), and the module that contains the address.
// It caches per module, so the same address in many stacks costs one lookup.
package symbolize

import (
	"path/filepath"
	"sync"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/unwind"
)

// Location is what is known about a frame's code address.
type Location struct {
	// Function is the symbol containing the address ("" when unknown).
	Function string
	// Offset is the address's offset into Function.
	Offset uint64
	// Module is the path of the mapped object ("" for anonymous memory).
	Module string
}

// ModuleBase returns the module's base name ("libc.so.6"), or "" if none.
func (l Location) ModuleBase() string {
	if l.Module == "" {
		return ""
	}
	return filepath.Base(l.Module)
}

// Symbolizer resolves addresses in an address space. It is safe for
// concurrent use.
type Symbolizer struct {
	// DebugDirs are searched for separate debug files (nil means
	// DefaultDebugDir; empty means none).
	DebugDirs []string

	mu       sync.Mutex
	cache    map[key]Location
	symFiles map[*unwind.Module]*elfobj.File
}

type key struct {
	mod  *unwind.Module
	addr uint64
}

// Frame resolves a frame (using its lookup PC, so a return address is
// attributed to the call instruction's function).
func (s *Symbolizer) Frame(space *unwind.AddressSpace, f *unwind.Frame) Location {
	loc := s.Addr(space, f.LookupPC())
	if loc.Function != "" && !f.Exact && f.PC != 0 {
		loc.Offset++ // report the offset of the return address itself
	}
	return loc
}

// Addr resolves one runtime address.
func (s *Symbolizer) Addr(space *unwind.AddressSpace, addr uint64) Location {
	m := space.Find(addr)
	if m == nil {
		return Location{}
	}
	loc := Location{Module: m.Path}
	if m.Module == nil || m.Module.File == nil {
		return loc
	}
	k := key{m.Module, addr - m.Bias}
	s.mu.Lock()
	if l, ok := s.cache[k]; ok {
		s.mu.Unlock()
		return l
	}
	s.mu.Unlock()
	if name, off, ok := s.SymbolFile(m.Module).Symbolize(k.addr); ok {
		loc.Function, loc.Offset = name, off
	} else if name, off, ok := m.Module.File.Symbolize(k.addr); ok {
		loc.Function, loc.Offset = name, off
	}
	s.mu.Lock()
	if s.cache == nil {
		s.cache = map[key]Location{}
	}
	s.cache[k] = loc
	s.mu.Unlock()
	return loc
}
