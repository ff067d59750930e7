package target

import (
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/internal/jitdump"
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
	debugOnce sync.Once
	debug     *elfobj.File
	memo      [maxMemoKeys]atomic.Pointer[memoEntry]
}

// DebugFile returns the module's separate debug file found in
// elfobj.DefaultDebugDir, opened once per module; nil when there is none.
// The symbolizer's symbol tables and the thread roots share it.
func (m *Module) DebugFile() *elfobj.File {
	if m == nil || m.File == nil {
		return nil
	}
	m.debugOnce.Do(func() { m.debug = elfobj.FindDebugFile(m.File, []string{elfobj.DefaultDebugDir}) })
	return m.debug
}

// MemoKey names one kind of data derived from a module (see Module.Memo).
type MemoKey uint8

// maxMemoKeys bounds the number of MemoKeys a program may create.
const maxMemoKeys = 16

var (
	memoMu   sync.Mutex
	memoKeys MemoKey
)

// NewMemoKey returns a new key for Module.Memo. Packages create their keys
// once, in a package-level variable; it panics after 16 keys (a
// programming error, not a runtime condition).
func NewMemoKey() MemoKey {
	memoMu.Lock()
	defer memoMu.Unlock()
	if memoKeys >= maxMemoKeys {
		panic("target: too many memo keys")
	}
	memoKeys++
	return memoKeys - 1
}

type memoEntry struct {
	once sync.Once
	v    any
}

// Memo returns the value the module keeps under key, calling compute to
// make it on first use (once, even when called concurrently). Packages
// that derive data from an object — its parsed SFrame section, the
// extents of its thread-root functions, its signal trampolines, its PLT
// names — keep it here, so it is computed once per object and lives
// exactly as long as the module. After the first call it costs two atomic
// loads, so unwinders may call it per frame.
func (m *Module) Memo(key MemoKey, compute func(*Module) any) any {
	slot := &m.memo[key]
	e := slot.Load()
	if e == nil {
		slot.CompareAndSwap(nil, &memoEntry{})
		e = slot.Load()
	}
	e.once.Do(func() { e.v = compute(m) })
	return e.v
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
		key := tableKey(m.File)
		if key == "" {
			key = "path:" + m.Path
			if fi, err := os.Stat(m.Path); err == nil {
				key += fmt.Sprintf(":%d:%d", fi.Size(), fi.ModTime().UnixNano())
			}
		}
		m.table, m.tableErr = m.objs.Tables.GetFile(key, m.File)
	})
	return m.table, m.tableErr
}

// ModuleWithTable returns a module with no object file whose unwind rules
// are t: for code that is not in an ELF file (generated code whose rules
// are known) and for tests.
func ModuleWithTable(path string, t *unwindtable.Table) *Module {
	m := &Module{Path: path}
	m.tableOnce.Do(func() { m.table = t })
	return m
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

// Forget drops the module opened for path, if any: the next Module call
// opens path again. A dump that opened a process's objects while the
// process was being stopped forgets those whose mapping the capture found
// changed. Modules already handed out stay usable.
func (o *Objects) Forget(path string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.byPath, path)
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

// Mapping is one mapped range of an address space, whatever described it
// (a line of /proc/PID/maps, a core's NT_FILE entry, a perf MMAP2 record).
type Mapping struct {
	Start, End uint64
	Offset     uint64 // file offset mapped at Start
	// Path is the mapped file, "" for anonymous memory, or the kernel's
	// name for special memory ("[vdso]", "[stack]", "[heap]").
	Path string
	// Perms are the permissions as /proc/PID/maps prints them ("r-xp"),
	// or "" when the source does not record them (a core's NT_FILE).
	Perms string
	// Deleted reports that the file was unlinked or replaced after it was
	// mapped (the kernel's " (deleted)" suffix, which Path does not keep).
	Deleted bool
	// Dev and Inode identify the mapped file ("fd:01", 1234), when known.
	Dev   string
	Inode uint64
	// Module is the object mapped here, nil for anonymous or special memory.
	Module *Module
	// Bias is the load bias: runtime address = object address + Bias.
	Bias uint64
	// JIT, for anonymous executable memory, names the code a JIT
	// compiler generated there (its perf map), nil when nothing does.
	JIT JITSymbols
}

// JITSymbols names code a JIT compiler generated in anonymous memory
// (internal/perfmap reads the maps Node, the JVM and CPython write).
type JITSymbols interface {
	// LookupJIT returns the name of the code holding pc and where that
	// code starts.
	LookupJIT(pc uint64) (name string, start uint64, ok bool)
}

// JITLines is implemented by JIT symbols that know the source lines of
// the code (a jitdump's debug info).
type JITLines interface {
	// LookupJITLine returns the file and line of pc.
	LookupJITLine(pc uint64) (file string, line int, ok bool)
}

// JITSources are JIT symbols from several sources (a jitdump, a perf
// map), asked in order: the first that names the code names it, and gives
// its line.
type JITSources []JITSymbols

// LookupJIT implements JITSymbols.
func (s JITSources) LookupJIT(pc uint64) (string, uint64, bool) {
	for _, j := range s {
		if name, start, ok := j.LookupJIT(pc); ok {
			return name, start, true
		}
	}
	return "", 0, false
}

// LookupJITLine implements JITLines, from the source that names pc.
func (s JITSources) LookupJITLine(pc uint64) (string, int, bool) {
	for _, j := range s {
		if _, _, ok := j.LookupJIT(pc); ok {
			if l, ok := j.(JITLines); ok {
				return l.LookupJITLine(pc)
			}
			return "", 0, false
		}
	}
	return "", 0, false
}

// IsFile reports whether the mapping is of a file (its Path is absolute),
// as opposed to anonymous or special memory ([stack], [vdso], ...).
func (m *Mapping) IsFile() bool { return len(m.Path) > 0 && m.Path[0] == '/' }

// Executable reports whether the mapping is executable; a mapping whose
// permissions are unknown counts as executable when it maps a file or the
// vDSO.
func (m *Mapping) Executable() bool {
	if m.Perms == "" {
		return m.IsFile() || m.Path == "[vdso]"
	}
	return len(m.Perms) > 2 && m.Perms[2] == 'x'
}

// AddressSpace resolves runtime addresses to mappings.
type AddressSpace struct {
	maps []*Mapping // sorted by Start
}

// NewAddressSpace builds an address space from mappings. Executable
// mappings of files get their Module (through objs) and load bias
// computed here; a file that cannot be opened leaves Module.File nil, and
// its error is kept.
func NewAddressSpace(maps []Mapping, objs *Objects) *AddressSpace {
	s := &AddressSpace{}
	for i := range maps {
		m := maps[i]
		// Only code needs its object: data files mapped by the process
		// (locale archives, caches, fonts) are never opened.
		// A jitdump is mapped executable only for perf to see it (the
		// JIT sources read it): it is no object.
		if m.Module == nil && objs != nil && m.IsFile() && m.Executable() && !jitdump.IsDump(m.Path) {
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
