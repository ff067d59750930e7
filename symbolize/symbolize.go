// Package symbolize turns unwound frames into names and source positions.
//
// For a frame's address it reports the physical function (name and offset
// from the object's symbol tables, or those of its separate debug file,
// found by build-id or .gnu_debuglink) and, when debug information is
// available, the source file and line and the chain of inlined calls at
// that address:
//
//   - Go binaries (recognised by their pcln table, .gopclntab): function,
//     file, line and inlined calls from the table the Go runtime itself
//     uses, as runtime.CallersFrames reports them.
//   - Everything else with DWARF (in the object or its separate debug
//     file): file and line from the line tables, inlined calls from
//     DW_TAG_inlined_subroutine, as addr2line -i reports them.
//   - Without either: the symbol only, as before.
//
// C++ and Rust names are demangled (see Demangle).
//
// Naming rule: the physical (last) entry of a frame is named from the
// symbol table (the separate debug file's when there is one), without its
// symbol version and demangled, except in Go code, where the pcln table's
// name (which is the symbol name) is used so stripped Go binaries are
// named too. Where several symbols share the address, the name is the one
// perf report and perf script print (elfobj.File.Symbolize: a sized
// symbol, then a non-weak one, a global one, fewer leading underscores,
// the longer name): __memmove_avx_unaligned_erms rather than its alias
// __memcpy_avx_unaligned_erms, __libc_pause rather than the weak pause,
// __libc_start_main (from __libc_start_main@@GLIBC_2.34) rather than
// __libc_start_main_impl. The symbol wins over DWARF's subprogram name
// even where DWARF names the function (__libc_start_main_impl, as gdb and
// eu-stack -d print it): the symbol table is what every object has,
// stripped or not, so a frame is named the same with and without debug
// information, and the same as in the perf profiles people compare with.
// If no symbol covers the address the DWARF subprogram's name is used.
// Inlined entries are named from DWARF (the demangled DW_AT_linkage_name,
// else DW_AT_name, as addr2line -C does) or from the Go inline tree.
//
// Everything derived from an object (indexes and per-address results) is
// cached per build-id in a Cache, shared by default between Symbolizers,
// so repeated dumps of the same process, or of processes that map the same
// libraries, are cheap.
package symbolize

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/internal/cachefile"
	"github.com/rewindstack/rewind/internal/elfdata"
	"github.com/rewindstack/rewind/internal/goruntime"
	"github.com/rewindstack/rewind/target"
)

// Location is what is known about one function activation at a frame's
// code address: the physical function, or one inlined call in it.
type Location struct {
	// Function is the function's name, demangled ("" when unknown).
	Function string
	// Offset is the address's offset into Function. It is set on the
	// physical entry only (0 for inlined entries). For a frame whose PC
	// is a return address it is the return address's offset.
	Offset uint64
	// Module is the path of the mapped object ("" for anonymous memory).
	Module string
	// File and Line are the source position: for the innermost entry,
	// the position of the address itself; for each entry outside it, the
	// position of the call that was inlined into it. Empty and 0 when
	// there is no line information.
	File string
	Line int
	// Inlined is true for an entry that is an inlined call rather than
	// the physical function.
	Inlined bool
	// Mangled is the raw symbol name when Function differs from it: when
	// it was demangled, or its symbol version dropped
	// ("__libc_start_main@@GLIBC_2.34" for "__libc_start_main"). Physical
	// entries only; "" otherwise.
	Mangled string
	// GoWrapper marks Go compiler-generated code (method, go-statement
	// and ABI wrappers: abi.FuncIDWrapper), which Go's tracebacks elide.
	GoWrapper bool
	// JIT marks code a JIT compiler generated, named by its perf map or
	// jitdump (target.Mapping.JIT): Function is the name exactly; File and
	// Line are the jitdump's debug info, when it has some.
	JIT bool
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
	// elfobj.DefaultDebugDir; empty means none).
	DebugDirs []string
	// FindDebug, when not nil, is asked for an object's separate debug
	// file when DebugDirs have none (a --debug-dir, a sysroot, perf's
	// build-id cache, debuginfod: see package locate).
	FindDebug func(f *elfobj.File) *elfobj.File
	// Inlines makes Frame return the inlined calls at a frame's address
	// before the physical function. Without it Frame returns the physical
	// entry alone (one frame per physical frame, as eu-stack prints
	// without -i); that entry is the same either way.
	Inlines bool
	// TailCalls asks those that assemble frames (package stacks) to add,
	// between a frame and its caller, the functions that left by a tail
	// call, where DWARF's call sites tell them for sure (see
	// TailCallFrames). Physical frames are never replaced.
	TailCalls bool
	// Cache holds what is derived from objects; nil means a cache shared
	// by every Symbolizer of the process.
	Cache *Cache

	mu       sync.Mutex
	symFiles map[*target.Module]*elfobj.File
	mods     map[*target.Module]*modInfo
}

// modInfo is what a Symbolizer knows of one module.
type modInfo struct {
	obj, sym *elfobj.File
	info     *debugInfo
}

// Frame resolves a frame whose PC is pc (a return address unless exact)
// in mapping m, the mapping the walk found it in (unwind.Frame.Map; nil
// when it is in none). It uses the lookup address (pc-1 for a return
// address) so that a return address is attributed to the call
// instruction. The result has at least one entry: with Inlines set, the
// inlined calls at that address innermost first, then the physical
// function, always last; without, the physical function alone. An
// address outside any mapping gives one empty Location.
func (s *Symbolizer) Frame(m *target.Mapping, pc uint64, exact bool) []Location {
	lookup := pc
	if !exact && pc != 0 {
		lookup--
	}
	locs := s.resolve(m, lookup)
	phys := &locs[len(locs)-1]
	if phys.Function != "" && !exact && pc != 0 {
		phys.Offset++ // report the offset of the return address itself
	}
	if !s.Inlines {
		return locs[len(locs)-1:]
	}
	return locs
}

// Want is a frame Prepare is told of: its mapping, PC and whether the PC
// is exact, as Frame takes them.
type Want struct {
	Map   *target.Mapping
	PC    uint64
	Exact bool
}

// Prepare reads at once, one pass per object, the debug information
// that resolving frames will need, so that a large debug file is read
// only as far as its last unit that holds one of them (see
// NewIncrementalCache). Frame works without it, reading on as it needs.
func (s *Symbolizer) Prepare(frames []Want) {
	byMod := map[*modInfo][]uint64{}
	var order []*modInfo
	for _, f := range frames {
		m := f.Map
		if m == nil || m.Module == nil || m.Module.File == nil {
			continue
		}
		mi := s.module(m.Module)
		if _, ok := byMod[mi]; !ok {
			order = append(order, mi)
		}
		byMod[mi] = append(byMod[mi], lookupAddr(f)-m.Bias)
	}
	// Objects apart, at once: one after the other, the program's own
	// small DWARF waited for libc's (0.6 ms at the end of a cold dump).
	var wg sync.WaitGroup
	for _, mi := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if mi.info.goTable() != nil {
				return
			}
			if dw := mi.info.dwarf(); dw != nil {
				dw.want(byMod[mi])
				if s.TailCalls {
					dw.wantCalls(byMod[mi])
				}
			}
		}()
	}
	wg.Wait()
}

// Preload opens the DWARF index of each object the frames in starts are
// in (a dump gives the threads' current PCs, known before any unwinding,
// which are mostly in libc) and, when the index lacks units they need,
// starts reading them in the background, with the object's symbol table:
// a dump calls it before unwinding, so that the decompression runs on
// another core meanwhile. Nothing depends on it having finished, and it
// returns at once: opening libc's debug file and its index took 2 to 3.5
// ms in a cold dump, which the unwinding waited for.
func (s *Symbolizer) Preload(starts []Want) {
	addrs := map[*target.Module][]uint64{}
	for _, f := range starts {
		if m := f.Map; m != nil && m.Module != nil && m.Module.File != nil {
			addrs[m.Module] = append(addrs[m.Module], lookupAddr(f)-m.Bias)
		}
	}
	for mod, as := range addrs {
		go func() {
			mi := s.module(mod)
			if mi.info.goTable() != nil {
				return
			}
			dw := mi.info.dwarf()
			if dw == nil || len(dw.missing(as)) == 0 {
				return
			}
			// The other sections first, then the symbol table (libc's
			// debug file: 2 ms or more; after the units, it came last),
			// each in goroutines of their own, then .debug_info here.
			dw.prefetch(as)
			if mi.sym != nil {
				go mi.sym.LoadSymbols()
			}
			dw.want(as)
			for _, a := range as {
				dw.lookup(a) // parses its units
			}
		}()
	}
}

// PrepareModule opens, ahead of any lookup, what resolving addresses in
// module m reads first: its symbol file, its Go table or DWARF index (from
// the persistent cache when that has one) and its symbol table. A dump
// calls it, in the background, for the objects it expects frames in while
// the process is being stopped. It returns when done.
func (s *Symbolizer) PrepareModule(m *target.Module) {
	if m == nil || m.File == nil {
		return
	}
	mi := s.module(m)
	if mi.info.goTable() != nil {
		return
	}
	mi.info.dwarf()
	// The symbol file's table (the object's own is read only for an
	// address the symbol file does not name).
	if mi.sym != nil {
		_ = mi.sym.LoadSymbols()
	}
}

// ReadAhead decompresses, in the calling goroutine and in no other, the
// part of each object's .debug_info that holds the units the frames in
// starts need and that the index lacks: the longest part of a cold dump's
// symbolization, begun by a dump while the process is being stopped (one
// goroutine, so that the capture keeps a CPU). Units are parsed later,
// as ever (Prepare, Frame); it returns when done.
func (s *Symbolizer) ReadAhead(starts []Want) {
	addrs := map[*target.Module][]uint64{}
	var order []*target.Module
	for _, f := range starts {
		if m := f.Map; m != nil && m.Module != nil && m.Module.File != nil {
			if _, ok := addrs[m.Module]; !ok {
				order = append(order, m.Module)
			}
			addrs[m.Module] = append(addrs[m.Module], lookupAddr(f)-m.Bias)
		}
	}
	for _, mod := range order {
		mi := s.module(mod)
		if mi.info.goTable() != nil {
			continue
		}
		if dw := mi.info.dwarf(); dw != nil {
			dw.readAhead(addrs[mod])
		}
	}
}

// lookupAddr is the address a frame is looked up at: a return address's
// call instruction.
func lookupAddr(f Want) uint64 {
	if !f.Exact && f.PC != 0 {
		return f.PC - 1
	}
	return f.PC
}

// Flush writes what the Symbolizer's cache learnt to its persistent
// cache (see Cache.Flush).
func (s *Symbolizer) Flush() {
	c := s.Cache
	if c == nil {
		c = sharedCache
	}
	c.Flush()
}

// Addr resolves one runtime address to its physical function.
func (s *Symbolizer) Addr(space *target.AddressSpace, addr uint64) Location {
	locs := s.resolve(space.Find(addr), addr)
	return locs[len(locs)-1]
}

// resolve returns a fresh copy of the entries at addr in m, Module filled
// in.
func (s *Symbolizer) resolve(m *target.Mapping, addr uint64) []Location {
	if m == nil {
		return []Location{{}}
	}
	if (m.Module == nil || m.Module.File == nil) && m.JIT != nil {
		if name, start, ok := m.JIT.LookupJIT(addr); ok {
			l := Location{Function: name, Offset: addr - start, JIT: true}
			if jl, ok := m.JIT.(target.JITLines); ok {
				l.File, l.Line, _ = jl.LookupJITLine(addr)
			}
			return []Location{l}
		}
	}
	if m.Module == nil || m.Module.File == nil {
		return []Location{{Module: m.Path}}
	}
	mi := s.module(m.Module)
	cached := mi.info.resolve(addr-m.Bias, mi)
	locs := make([]Location, len(cached))
	copy(locs, cached)
	for i := range locs {
		locs[i].Module = m.Path
	}
	if phys := &locs[len(locs)-1]; phys.Function == "" {
		// Symbol tables do not cover PLT stubs; name them as objdump and
		// perf do ("malloc@plt").
		if name, ok := m.Module.File.PLTName(addr - m.Bias); ok {
			phys.Function = name
		}
	}
	return locs
}

// module returns the Symbolizer's view of m, creating it on first use.
func (s *Symbolizer) module(m *target.Module) *modInfo {
	s.mu.Lock()
	mi := s.mods[m]
	s.mu.Unlock()
	if mi != nil {
		return mi
	}
	sym := s.SymbolFile(m)
	c := s.Cache
	if c == nil {
		c = sharedCache
	}
	mi = &modInfo{obj: m.File, sym: sym, info: c.get(m.File, sym, s.debugDirs())}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.mods[m]; old != nil {
		return old
	}
	if s.mods == nil {
		s.mods = map[*target.Module]*modInfo{}
	}
	s.mods[m] = mi
	return mi
}

func (s *Symbolizer) debugDirs() []string {
	if s.DebugDirs == nil {
		return []string{elfobj.DefaultDebugDir}
	}
	return s.DebugDirs
}

// Cache keeps, per object (by build-id), the Go and DWARF indexes built
// from it and the entries resolved at each address. It is safe for
// concurrent use. Entries are never evicted: an object's index is a
// fraction of the size of its debug information, and the per-address
// results are bounded by maxResults.
type Cache struct {
	dir         string // persistent cache directory ("" for memory only)
	incremental bool   // see NewIncrementalCache
	mu          sync.Mutex
	byKey       map[string]*debugInfo
}

// NewCache returns an empty cache.
func NewCache() *Cache { return &Cache{byKey: map[string]*debugInfo{}} }

// Flush writes to the persistent cache what an incremental cache (see
// NewIncrementalCache) learnt since it was read or last flushed: the DWARF
// units lookups parsed. It does nothing for other caches, which write
// each index whole when they build it.
func (c *Cache) Flush() {
	c.mu.Lock()
	dis := make([]*debugInfo, 0, len(c.byKey))
	for _, di := range c.byKey {
		dis = append(dis, di)
	}
	c.mu.Unlock()
	for _, di := range dis {
		di.flush()
	}
}

var sharedCache = NewCache()

// Len returns the number of objects cached.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byKey)
}

// maxResults bounds the per-address results kept for one object; past it
// the table is started afresh.
const maxResults = 1 << 20

// debugInfo is everything derived from one object and its debug file.
type debugInfo struct {
	objPath, symPath string
	dirs             []string

	goOnce sync.Once
	gt     *goruntime.Table

	dwOnce sync.Once
	dw     *dwarfIndex
	dwDone atomic.Bool // dwOnce has run: dw, saved and key are set
	// dirsMade is closed when the directories of an incremental index's
	// file are made, in the background (nil: none being made).
	dirsMade chan struct{}

	// incremental: the persistent index holds the units looked into so
	// far (written by flush, as saved with key), not all of them.
	incremental bool
	saved, key  string
	flushed     bool // written by flush at least once

	mu      sync.RWMutex
	results map[uint64][]Location // Module not set

	dir string // persistent cache directory, "" for none
	bid string // the object's build-id, hex

	// objGo and symGo: the object and the symbol file have one of the
	// sections of a Go binary (elfobj.File.Go), without which openGoTable
	// finds no table.
	objGo, symGo bool
}

// get returns the cache entry of an object whose symbols come from sym.
// The key is the object's build-id and path (and the debug file's path,
// since the same object may be paired with different debug files);
// without a build-id, the path, size and modification time of the object.
// The path matters even with a build-id: a build-id is a claim the file
// makes, and a program linked with libc's (--build-id=0x…, go build -B)
// is paired with libc's debug file, but must not lend libc its own Go
// table or symbols.
func (c *Cache) get(obj, sym *elfobj.File, dirs []string) *debugInfo {
	key := obj.BuildIDHex()
	if key != "" {
		key += "\x00" + obj.Path
	} else {
		key = "path:" + obj.Path
		if fi, err := os.Stat(obj.Path); err == nil && fi.Mode().IsRegular() {
			key += fmt.Sprintf(":%d:%d", fi.Size(), fi.ModTime().UnixNano())
		} else {
			key += fmt.Sprintf(":%p", obj) // not a file: never shared
		}
	}
	key += "\x00" + sym.Path
	c.mu.Lock()
	defer c.mu.Unlock()
	if di := c.byKey[key]; di != nil {
		return di
	}
	di := &debugInfo{objPath: obj.Path, symPath: sym.Path, dirs: dirs, results: map[uint64][]Location{}, incremental: c.incremental,
		objGo: obj.Go, symGo: sym.Go}
	if id := obj.BuildIDHex(); len(id) > 2 {
		di.dir, di.bid = c.dir, id
	}
	c.byKey[key] = di
	return di
}

// goTable returns the object's Go pcln table, or nil if it is not a Go
// binary.
func (di *debugInfo) goTable() *goruntime.Table {
	di.goOnce.Do(func() {
		for _, p := range uniq(di.objPath, di.symPath) {
			if !(p == di.objPath && di.objGo || p == di.symPath && di.symGo) {
				// No Go section: nothing to open the file again for
				// (libc and its debug file: 0.5 to 1 ms of a dump).
				continue
			}
			ef, err := elfdata.Open(p)
			if err != nil {
				continue
			}
			gt, err := goruntime.OpenTable(ef.ELF, p)
			ef.Close()
			if err == nil {
				di.gt = gt
				return
			}
		}
	})
	return di.gt
}

// dwarf returns the DWARF index of the debug file, or else of the object;
// nil if neither has DWARF. With the persistent cache, an index read from
// it is used as it is, missing units parsed from DWARF on demand when the
// cache is incremental (see Cache.Flush), else, as for a new index, all
// its units are parsed and the file written at once.
func (di *debugInfo) dwarf() *dwarfIndex {
	di.dwOnce.Do(func() {
		defer di.dwDone.Store(true)
		for _, p := range uniq(di.symPath, di.objPath) {
			var saved, key string
			var stored *dwarfIndex
			if di.dir != "" && len(di.bid) >= 2 {
				saved, key = indexKey(di.bid, p)
				ix, err := readIndex(di.dir, saved, key)
				if err == nil {
					path, dirs := p, di.dirs
					ix.open = func() *dwarfSource { return openDWARF(path, dirs) }
					if di.incremental || ix.complete() {
						di.dw, di.saved, di.key = ix, saved, key
						return
					}
					stored = ix
				} else {
					cachefile.Note(err, "DWARF index rebuilt")
				}
			}
			if stored != nil {
				// Not incremental: complete the index now, once.
				stored.buildAll()
				di.dw = stored
				di.useSaved(p, saved, key, writeIndex(di.dir, saved, key, stored))
				return
			}
			src := openDWARF(p, di.dirs)
			if src == nil {
				continue
			}
			di.dw = newDWARFIndex(src, src.alt)
			if saved == "" {
				return
			}
			if di.incremental {
				// Units are parsed as lookups need them; Flush saves them,
				// at the end of a dump: its directories are made now.
				di.saved, di.key = saved, key
				made := make(chan struct{})
				di.dirsMade = made
				go func() {
					defer close(made)
					cachefile.MakeDirs(di.dir, saved)
				}()
				return
			}
			// Index everything once, so later runs need no DWARF at all.
			di.dw.buildAll()
			di.useSaved(p, saved, key, writeIndex(di.dir, saved, key, di.dw))
			return
		}
	})
	return di.dw
}

// useSaved notes err, writeIndex's, and when the index was written uses
// it as read back from its file instead of the one built: the units it
// holds are then decoded as lookups need them, from the file (mapped when
// large), and the built units and the DWARF they were parsed from are
// dropped. (A report, which builds whole indexes, kept every one it built
// in memory: the first report of a 2.2 GB system-wide recording beside a
// build, with an empty cache, peaked at 305 MB of anonymous memory.)
func (di *debugInfo) useSaved(path, saved, key string, err error) {
	cachefile.Note(err, "DWARF index not saved")
	if err != nil {
		return
	}
	ix, err := readIndex(di.dir, saved, key)
	if err != nil || !ix.complete() {
		return
	}
	dirs := di.dirs
	ix.open = func() *dwarfSource { return openDWARF(path, dirs) }
	di.dw = ix
}

// openDWARF opens the DWARF of the file at path and its dwz supplementary
// file; nil if it has none.
func openDWARF(path string, dirs []string) *dwarfSource {
	src, err := openSource(path)
	if err != nil {
		return nil
	}
	src.alt = loadAlt(src.h.ELF, path, dirs)
	return src
}

// flush writes the index to the cache if units were parsed from DWARF
// since it was read or written.
func (di *debugInfo) flush() {
	if !di.dwDone.Load() {
		return
	}
	if di.dirsMade != nil {
		<-di.dirsMade // nothing of this index is left running after Flush
	}
	if di.saved == "" || di.dw == nil {
		return
	}
	ix := di.dw
	ix.mu.Lock()
	built := ix.built
	ix.built = 0
	ix.mu.Unlock()
	// A new index is written even with no unit in it: the next run then
	// reads its unit table instead of opening the DWARF.
	if built == 0 && (ix.stored != nil || di.flushed) {
		return
	}
	di.flushed = true
	cachefile.Note(writeIndex(di.dir, di.saved, di.key, ix), "DWARF index not saved")
}

func uniq(a, b string) []string {
	if a == b {
		return []string{a}
	}
	return []string{a, b}
}

// resolve returns the (shared, read-only) entries at object address vaddr.
func (di *debugInfo) resolve(vaddr uint64, mi *modInfo) []Location {
	di.mu.RLock()
	locs, ok := di.results[vaddr]
	di.mu.RUnlock()
	if ok {
		return locs
	}
	locs = di.compute(vaddr, mi)
	di.mu.Lock()
	if len(di.results) >= maxResults {
		di.results = map[uint64][]Location{}
	}
	di.results[vaddr] = locs
	di.mu.Unlock()
	return locs
}

// compute resolves vaddr: Go table first, then symbols and DWARF.
func (di *debugInfo) compute(vaddr uint64, mi *modInfo) []Location {
	if gt := di.goTable(); gt != nil {
		var frames []goruntime.Frame
		var ok bool
		if elfdata.Protect(func() error { frames, ok = gt.Frames(vaddr); return nil }) == nil && ok {
			locs := make([]Location, len(frames))
			for i, f := range frames {
				locs[i] = Location{Function: f.Function, Offset: f.Offset, File: f.File, Line: f.Line, Inlined: f.Inlined, GoWrapper: f.Wrapper}
			}
			return locs
		}
	}
	var phys Location
	raw, off, haveSym := mi.sym.Symbolize(vaddr)
	if !haveSym {
		raw, off, haveSym = mi.obj.Symbolize(vaddr)
	}
	if haveSym {
		phys.Function, phys.Offset = Demangle(Unversioned(raw)), off
		if phys.Function != raw {
			phys.Mangled = raw
		}
	}
	var frames []dwarfFrame
	if dw := di.dwarf(); dw != nil {
		frames, _ = dw.lookup(vaddr)
	}
	if len(frames) == 0 {
		return []Location{phys}
	}
	locs := make([]Location, 0, len(frames))
	for _, fr := range frames[:len(frames)-1] {
		locs = append(locs, Location{Function: fr.name, File: fr.file, Line: fr.line, Inlined: true})
	}
	last := frames[len(frames)-1]
	phys.File, phys.Line = last.file, last.line
	if !haveSym && last.name != "" {
		phys.Function = last.name
		if last.lo != 0 && vaddr >= last.lo {
			phys.Offset = vaddr - last.lo
		}
	}
	return append(locs, phys)
}
