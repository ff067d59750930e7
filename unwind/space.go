package unwind

import (
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/rewindstack/rewind/cfi"
	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/unwindtable"
)

// Module is an object file (executable, shared library, vdso) that may be
// mapped into address spaces, with its unwind table built on first use.
type Module struct {
	Path string
	// File is the opened object, or nil when it could not be read (Err says
	// why); frames in it still unwind by frame pointers.
	File *elfobj.File
	Err  error

	objs      *Objects
	tableOnce sync.Once
	table     *unwindtable.Table
	tableErr  error
	sigMu     sync.Mutex                      // serialises writers of sigCache
	sigCache  atomic.Pointer[map[uint64]bool] // PC in module -> is a sigreturn trampoline
	goTopOnce sync.Once
	goTop     [][2]uint64 // extents of the Go runtime's top-frame functions
}

// goTopFrames are the functions where the Go runtime's own traceback ends
// a stack (those its assembly marks TOPFRAME): a goroutine's entry, a
// thread's start on g0, the program's start. Below them is no caller, only
// what the stack or clone left there. Assembly functions carry the .abi0
// suffix in the symbol table.
var goTopFrames = map[string]bool{
	"runtime.goexit": true, "runtime.goexit.abi0": true,
	"runtime.mstart": true, "runtime.mstart.abi0": true,
	"runtime.rt0_go": true, "runtime.rt0_go.abi0": true,
}

// GoTopFrame reports whether vaddr (an address in the object's own
// address space) lies in a Go runtime top frame, by the symbol table of a
// Go binary (a stripped one has none, and this reports false). The
// functions' extents are looked up once per module; a walk then checks a
// frame against at most a few ranges.
func (m *Module) GoTopFrame(vaddr uint64) bool {
	if m == nil || m.File == nil || !m.File.Go {
		return false
	}
	m.goTopOnce.Do(func() {
		for name := range goTopFrames {
			if lo, hi, ok := m.File.SymbolExtent(name); ok && hi > lo {
				m.goTop = append(m.goTop, [2]uint64{lo, hi})
			}
		}
	})
	for _, r := range m.goTop {
		if vaddr >= r[0] && vaddr < r[1] {
			return true
		}
	}
	return false
}

// Table returns the module's compiled unwind table, building it (or taking
// it from the build-id cache) on first use. A module without CFI has an
// empty table.
func (m *Module) Table() (*unwindtable.Table, error) {
	m.tableOnce.Do(func() {
		if m.File == nil {
			m.tableErr = m.Err
			return
		}
		key := m.File.BuildIDHex()
		if key == "" {
			key = "path:" + m.Path
			if fi, err := os.Stat(m.Path); err == nil {
				key += fmt.Sprintf(":%d:%d", fi.Size(), fi.ModTime().UnixNano())
			}
		}
		m.table, m.tableErr = m.objs.Tables.Get(key, func() (*unwindtable.Table, error) {
			return BuildTable(m.File)
		})
	})
	return m.table, m.tableErr
}

// BuildTable compiles the CFI of an object (.eh_frame first, then
// .debug_frame for what it does not cover) into an unwind table.
func BuildTable(f *elfobj.File) (*unwindtable.Table, error) {
	var secs []*cfi.Section
	if s := f.EhFrame; s != nil {
		secs = append(secs, cfiSection(f, s, cfi.EhFrame))
	}
	if s := f.DebugFrame; s != nil {
		secs = append(secs, cfiSection(f, s, cfi.DebugFrame))
	}
	t, err := unwindtable.Build(f.Arch, secs...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Path, err)
	}
	return t, nil
}

func cfiSection(f *elfobj.File, s *elfobj.Section, kind cfi.Kind) *cfi.Section {
	ptr := 8
	if f.Class == 1 { // ELFCLASS32
		ptr = 4
	}
	sec := &cfi.Section{
		Name:      f.Path + " " + s.Name,
		Kind:      kind,
		Data:      s.Data,
		Addr:      s.Addr,
		ByteOrder: f.ByteOrder,
		PtrSize:   ptr,
	}
	if f.Text != nil {
		sec.TextAddr = f.Text.Addr
	}
	if f.GotPlt != nil {
		sec.DataAddr = f.GotPlt.Addr
	}
	return sec
}

// Objects opens object files once per path and shares compiled tables by
// build-id. One Objects serves every snapshot of a process (and may serve
// several processes).
type Objects struct {
	// Open opens an object by path; nil means elfobj.Open. Live-process
	// sources replace it to read through /proc/PID/map_files.
	Open   func(path string) (*elfobj.File, error)
	Tables unwindtable.Cache

	mu     sync.Mutex
	byPath map[string]*Module
}

// AddFile registers an object that is not opened by path (the [vdso],
// read from the target's memory) under key, and returns its module. A key
// seen before returns the existing module.
func (o *Objects) AddFile(key string, f *elfobj.File) *Module {
	o.mu.Lock()
	defer o.mu.Unlock()
	if m := o.byPath[key]; m != nil {
		return m
	}
	if o.byPath == nil {
		o.byPath = map[string]*Module{}
	}
	m := &Module{Path: key, File: f, objs: o}
	o.byPath[key] = m
	return m
}

// Module returns the module for path, opening it on first use.
func (o *Objects) Module(path string) *Module {
	o.mu.Lock()
	defer o.mu.Unlock()
	if m := o.byPath[path]; m != nil {
		return m
	}
	if o.byPath == nil {
		o.byPath = map[string]*Module{}
	}
	open := o.Open
	if open == nil {
		open = elfobj.Open
	}
	m := &Module{Path: path, objs: o}
	m.File, m.Err = open(path)
	if m.File == nil && m.Err == nil {
		m.Err = fmt.Errorf("%s: not opened", path)
	}
	o.byPath[path] = m
	return m
}

// Mapping is one mapped range of an address space.
type Mapping struct {
	Start, End uint64
	Offset     uint64 // file offset mapped at Start
	Path       string // empty for anonymous memory; "[vdso]", "[stack]", ... for special ones
	// Module is the object mapped here, nil for anonymous or special memory.
	Module *Module
	// Bias is the load bias: runtime address = object address + Bias.
	Bias uint64
}

// AddressSpace resolves runtime addresses to mappings.
type AddressSpace struct {
	maps []*Mapping // sorted by Start
}

// NewAddressSpace builds an address space from mappings. Mappings of files
// get their Module (through objs) and load bias computed here; a file that
// cannot be opened leaves Module.File nil, and its error is kept.
func NewAddressSpace(maps []Mapping, objs *Objects) *AddressSpace {
	s := &AddressSpace{}
	for i := range maps {
		m := maps[i]
		if m.Module == nil && objs != nil && m.Path != "" && m.Path[0] == '/' {
			m.Module = objs.Module(m.Path)
			if f := m.Module.File; f != nil {
				if b, err := f.Bias(m.Start, m.Offset); err == nil {
					m.Bias = b
				} else {
					m.Module = nil
				}
			}
		}
		s.maps = append(s.maps, &m)
	}
	sort.Slice(s.maps, func(i, j int) bool { return s.maps[i].Start < s.maps[j].Start })
	return s
}

// Mappings returns the mappings in address order.
func (s *AddressSpace) Mappings() []*Mapping { return s.maps }

// Find returns the mapping containing addr, or nil.
func (s *AddressSpace) Find(addr uint64) *Mapping {
	if s == nil {
		return nil
	}
	lo, hi := 0, len(s.maps)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s.maps[m].Start <= addr {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 {
		return nil
	}
	if m := s.maps[lo-1]; addr < m.End {
		return m
	}
	return nil
}
