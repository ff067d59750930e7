package symbolize

import (
	"bytes"
	"cmp"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/rewindstack/rewind/internal/elfdata"
	"io"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// dwarfIndex answers "which functions (inlined ones included) and which
// source line are at this address" from an object's DWARF.
//
// It is built in two steps so that the first lookup in a large object (the
// libc debug file, a compiler) costs little:
//
//   - on creation, only the compilation unit headers are read: each CU's
//     address ranges (DW_AT_ranges or low/high pc) go into one sorted table;
//   - the first lookup inside a CU parses that CU alone: its line table
//     into sorted rows, and its DIE tree into a compact inline tree (every
//     DW_TAG_subprogram with code and every DW_TAG_inlined_subroutine, in
//     preorder, with names resolved through DW_AT_abstract_origin and
//     DW_AT_specification) plus a sorted table of the subprograms' ranges.
//
// A lookup is then two binary searches and a walk down the inline tree.
// Built CUs are immutable and published atomically, so lookups run
// concurrently; building (and the name cache it uses) is serialised by mu.
//
// Anything debug/dwarf cannot read (a corrupt unit, an unsupported form,
// a split-DWARF unit whose .dwo is elsewhere) leaves the affected CU with
// whatever was read before the error; a panic inside debug/dwarf is
// recovered and leaves the CU empty. Callers fall back to symbols.
type dwarfIndex struct {
	// src reads the DWARF; for an index read from the persistent cache it
	// is opened (by open) only when a unit the file lacks is looked into.
	src  *dwarfSource
	open func() *dwarfSource
	alt  *dwarfAlt // the dwz supplementary file, if any

	// stored is set for an index read from the persistent cache: units it
	// holds are decoded from it rather than parsed from DWARF.
	stored *storedIndex

	// maxEntries bounds every walk over entries: debug/dwarf returns an
	// endless run of null entries, without error, from a varint that runs
	// off the end of a unit; each real entry takes at least one byte.
	maxEntries int

	cus    []cuSlot
	ranges []cuRange // sorted by lo
	maxHi  []uint64  // maxHi[i] = max(ranges[0..i].hi)

	mu    sync.Mutex
	built int // units parsed from DWARF (not decoded from stored)

	namesMu sync.Mutex // names is shared by units parsed at once
	names   map[nameKey]string

	fromAranges bool // units found by .debug_aranges (newDWARFIndex)
}

// cuSlot is one unit: the offset of its header in .debug_info, and its
// content once parsed or decoded (by one goroutine, holding mu; others
// wanting it wait).
type cuSlot struct {
	off  uint64
	data atomic.Pointer[cuData]
	mu   sync.Mutex
	// calls is the unit's call sites, read on first use (see tailcall.go).
	calls atomic.Pointer[unitCalls]
}

type cuRange struct {
	lo, hi uint64
	cu     int32
}

// cuData is the parsed content of one compilation unit.
type cuData struct {
	funcs []funcRange // ranges of subprogram nodes, sorted by lo
	maxHi []uint64
	nodes []inlNode // preorder
	rngs  [][2]uint64
	files []string
	lines []lineRow // sorted by address; line < 0 ends a sequence
}

type funcRange struct {
	lo, hi uint64
	node   int32
}

// inlNode is a subprogram or an inlined call. Its subtree is
// nodes[index+1 : end].
type inlNode struct {
	name     string
	rOff, rN uint32 // ranges: rngs[rOff : rOff+rN]
	end      int32
	callFile int32
	callLine int32
	inline   bool
}

type lineRow struct {
	addr uint64
	file int32
	line int32
}

// dwarfAlt is a dwz supplementary file (.gnu_debugaltlink): DIEs and
// strings that several debug files share, referred to by
// DW_FORM_GNU_ref_alt and DW_FORM_GNU_strp_alt.
type dwarfAlt struct {
	d   *dwarf.Data
	str []byte
}

type nameKey struct {
	off dwarf.Offset
	alt bool
}

const (
	attrMIPSLinkageName = dwarf.Attr(0x2007)
	maxNameHops         = 16
	maxInlineDepth      = 256
)

// errNoDWARF: the file has no .debug_info.
var errNoDWARF = errors.New("no DWARF")

// debugSections are the DWARF sections symbolization reads (location
// lists, macros and frames are left out), by name without ".debug_".
var debugSections = []string{"abbrev", "info", "line", "ranges", "str", "addr", "line_str", "str_offsets", "rnglists"}

// loadDWARF reads the sections symbolization needs and makes a
// dwarf.Data of them; it also returns .debug_line and the size of
// .debug_info.
func loadDWARF(ef *elf.File) (*dwarf.Data, []byte, int, error) {
	secs := map[string][]byte{}
	for _, name := range debugSections {
		s := ef.Section(".debug_" + name)
		if s == nil {
			s = ef.Section(".zdebug_" + name)
		}
		if s == nil || s.Type == elf.SHT_NOBITS {
			continue
		}
		b, err := elfdata.Section(s)
		if err != nil {
			return nil, nil, 0, err
		}
		secs[name] = b
	}
	if secs["info"] == nil {
		return nil, nil, 0, errNoDWARF
	}
	d, err := dwarfFromSections(secs)
	return d, secs["line"], len(secs["info"]), err
}

// dwarfFromSections makes a dwarf.Data of section contents keyed by name
// without ".debug_".
func dwarfFromSections(secs map[string][]byte) (*dwarf.Data, error) {
	var d *dwarf.Data
	err := elfdata.Protect(func() error {
		var err error
		d, err = dwarf.New(secs["abbrev"], nil, nil, secs["info"], secs["line"], nil, secs["ranges"], secs["str"])
		if err != nil {
			return err
		}
		for _, name := range []string{"addr", "line_str", "str_offsets", "rnglists"} {
			if b := secs[name]; b != nil {
				if err := d.AddSection(".debug_"+name, b); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// loadAlt opens the dwz supplementary file named by ef's
// .gnu_debugaltlink (a path, relative to the debug file's directory, and
// the build-id), looking also under the debug directories by build-id.
func loadAlt(ef *elf.File, path string, dirs []string) *dwarfAlt {
	s := ef.Section(".gnu_debugaltlink")
	if s == nil {
		return nil
	}
	b, err := elfdata.Section(s)
	if err != nil {
		return nil
	}
	nul := bytes.IndexByte(b, 0)
	if nul < 0 {
		return nil
	}
	name, id := string(b[:nul]), fmt.Sprintf("%x", b[nul+1:])
	var cands []string
	if name != "" {
		if !filepath.IsAbs(name) {
			name = filepath.Join(filepath.Dir(path), name)
		}
		cands = append(cands, name)
	}
	if len(id) > 2 {
		for _, d := range dirs {
			cands = append(cands, filepath.Join(d, ".build-id", id[:2], id[2:]+".debug"))
		}
	}
	for _, c := range cands {
		af, err := elfdata.Open(c)
		if err != nil {
			continue
		}
		d, _, _, err := loadDWARF(af.ELF)
		var str []byte
		if s := af.ELF.Section(".debug_str"); s != nil && err == nil {
			str, _ = elfdata.Section(s)
		}
		af.Close()
		if err == nil {
			return &dwarfAlt{d: d, str: str}
		}
	}
	return nil
}

// newDWARFIndex indexes the units of src by their address ranges: from
// .debug_aranges when the object has it (no unit need be read, so a few
// lookups decompress only as much of .debug_info as they look into), else
// from the unit entries (DW_AT_ranges, low and high pc), which means
// reading all of .debug_info.
//
// .debug_aranges may list only some units: clang emits none unless told
// to, so a clang program linked with gcc's start-up files lists only
// those. Without reading every unit that cannot be told for sure, but
// such a table covers little of the code: it is used only if it covers
// at least 90% of the object's executable sections (libc: 97%; the rest
// is code without debug information).
func newDWARFIndex(src *dwarfSource, alt *dwarfAlt) *dwarfIndex {
	ix := &dwarfIndex{src: src, alt: alt, names: map[nameKey]string{}, maxEntries: int(min(src.infoSize, elfdata.MaxSection)) + 1}
	if ix.alt == nil {
		ix.alt = src.alt
	}
	if ar, ok := parseAranges(src.aranges, src.bo); ok && len(ar) > 0 && covers(ar, src.execSize) {
		ix.fromAranges = true
		offs := make([]uint64, 0, len(ar))
		for _, r := range ar {
			offs = append(offs, r.unit)
		}
		slices.Sort(offs)
		offs = compactSorted(offs)
		ix.cus = make([]cuSlot, len(offs))
		for i, o := range offs {
			ix.cus[i].off = o
		}
		ix.ranges = make([]cuRange, 0, len(ar))
		for _, r := range ar {
			ci, _ := slices.BinarySearch(offs, r.unit)
			ix.ranges = append(ix.ranges, cuRange{r.lo, r.hi, int32(ci)})
		}
	} else {
		ix.scanUnits()
	}
	// slices' sorts rather than sort's: no reflection (libc's 4,700
	// ranges, opening its index took about 1 ms, most of it sorting).
	slices.SortStableFunc(ix.ranges, func(a, b cuRange) int { return cmp.Compare(a.lo, b.lo) })
	ix.maxHi = prefixMax(len(ix.ranges), func(i int) uint64 { return ix.ranges[i].hi })
	return ix
}

// covers reports whether the ranges cover at least 90% of size bytes (or
// size is unknown).
func covers(ar []arange, size uint64) bool {
	if size == 0 {
		return true
	}
	rs := make([]arange, len(ar))
	copy(rs, ar)
	slices.SortFunc(rs, func(a, b arange) int { return cmp.Compare(a.lo, b.lo) })
	var total, lo, hi uint64
	for i, r := range rs {
		switch {
		case i == 0:
			lo, hi = r.lo, r.hi
		case r.lo <= hi:
			hi = max(hi, r.hi)
		default:
			total += hi - lo
			lo, hi = r.lo, r.hi
		}
	}
	total += hi - lo
	return total >= size/10*9
}

func compactSorted(s []uint64) []uint64 {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// scanUnits reads every unit entry for its address ranges.
func (ix *dwarfIndex) scanUnits() {
	d := ix.src.all()
	if d == nil {
		return
	}
	var unranged []int
	_ = elfdata.Protect(func() error {
		r := d.Reader()
		for count := 0; count < ix.maxEntries; count++ {
			e, err := r.Next()
			if err != nil || e == nil {
				return nil
			}
			if e.Tag == dwarf.TagCompileUnit || e.Tag == dwarf.TagSkeletonUnit {
				hdr, ok := ix.src.unitOfDIE(uint64(e.Offset))
				if !ok {
					return nil
				}
				ci := len(ix.cus)
				ix.cus = append(ix.cus, cuSlot{off: hdr})
				rs, _ := d.Ranges(e)
				n := 0
				for _, rg := range rs {
					if rg[0] != 0 && rg[1] > rg[0] {
						ix.ranges = append(ix.ranges, cuRange{rg[0], rg[1], int32(ci)})
						n++
					}
				}
				if n == 0 {
					unranged = append(unranged, ci)
				}
			}
			r.SkipChildren()
		}
		return nil
	})
	// A unit without address ranges is indexed now, by the ranges of its
	// functions and line sequences.
	for _, ci := range unranged {
		cd := ix.cu(ci)
		for _, f := range cd.funcs {
			ix.ranges = append(ix.ranges, cuRange{f.lo, f.hi, int32(ci)})
		}
		var start uint64
		open := false
		for _, row := range cd.lines {
			switch {
			case row.line < 0 && open:
				ix.ranges = append(ix.ranges, cuRange{start, row.addr, int32(ci)})
				open = false
			case row.line >= 0 && !open:
				start, open = row.addr, true
			}
		}
	}
}

// source returns the DWARF source, opening it for an index read from the
// cache (nil if it cannot be opened). Called with mu held.
func (ix *dwarfIndex) source() *dwarfSource {
	if ix.src == nil && ix.open != nil {
		ix.src, ix.open = ix.open(), nil
		if ix.src != nil {
			ix.alt = ix.src.alt
			ix.maxEntries = int(min(ix.src.infoSize, elfdata.MaxSection)) + 1
		}
	}
	return ix.src
}

// cu returns unit ci's parsed data, parsing it on first use. Different
// units are parsed concurrently (see want): the dwarf.Data they read has
// every unit they enter entered once already (see dwarfSource.data).
func (ix *dwarfIndex) cu(ci int) *cuData {
	slot := &ix.cus[ci]
	if cd := slot.data.Load(); cd != nil {
		return cd
	}
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if cd := slot.data.Load(); cd != nil {
		return cd
	}
	if ix.stored != nil && ix.stored.has(ci) {
		cd := ix.stored.decodeCU(ci)
		slot.data.Store(cd)
		return cd
	}
	cd := &cuData{}
	ix.mu.Lock()
	src := ix.source()
	ix.mu.Unlock()
	if src != nil {
		if err := elfdata.Protect(func() error { return ix.buildCU(src, slot.off, cd) }); err != nil {
			cd = &cuData{} // a panic may have left it half built
		}
		ix.mu.Lock()
		ix.built++
		ix.mu.Unlock()
	}
	slot.data.Store(cd)
	return cd
}

// missing returns the header offsets of the units a lookup of addrs
// looks into that the index does not hold yet.
func (ix *dwarfIndex) missing(addrs []uint64) []uint64 {
	offs, _ := ix.missingUnits(addrs)
	return offs
}

// missingUnits is missing, with the units' indexes (each once).
func (ix *dwarfIndex) missingUnits(addrs []uint64) (offs []uint64, cis []int) {
	seen := map[int32]bool{}
	for _, pc := range addrs {
		i := sort.Search(len(ix.ranges), func(i int) bool { return ix.ranges[i].lo > pc }) - 1
		for ; i >= 0; i-- {
			r := ix.ranges[i]
			if pc < r.hi && ix.cus[r.cu].data.Load() == nil && (ix.stored == nil || !ix.stored.has(int(r.cu))) {
				offs = append(offs, ix.cus[r.cu].off)
				if !seen[r.cu] {
					seen[r.cu] = true
					cis = append(cis, int(r.cu))
				}
			}
			if i == 0 || ix.maxHi[i-1] <= pc {
				break
			}
		}
	}
	return offs, cis
}

// prefetch starts reading, in the background, what a lookup of addrs
// will need besides .debug_info (the other sections, the part of
// .debug_line), which want then reads.
func (ix *dwarfIndex) prefetch(addrs []uint64) {
	if src, last := ix.sourceFor(addrs); src != nil {
		src.startOthers()
		src.prefetchLine(last)
	}
}

// readAhead decompresses .debug_info as far as the units a lookup of
// addrs looks into that the index does not hold yet (see
// Symbolizer.ReadAhead).
func (ix *dwarfIndex) readAhead(addrs []uint64) {
	if src, last := ix.sourceFor(addrs); src != nil {
		src.mu.Lock()
		defer src.mu.Unlock()
		src.walkTo(last)
	}
}

// sourceFor returns the DWARF source and the last of the units a lookup
// of addrs looks into that the index does not hold yet, or nil when it
// holds them all (or there is no source).
func (ix *dwarfIndex) sourceFor(addrs []uint64) (*dwarfSource, uint64) {
	need := ix.missing(addrs)
	if len(need) == 0 {
		return nil, 0
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.source(), slices.Max(need)
}

// want makes sure the DWARF read covers every unit that a lookup of
// addrs looks into and the index does not hold yet, so that they are all
// read in one pass, and parses them, as many at once as there are CPUs:
// one after the other, the 14 units of libc the fixture's frames are in
// took about 4 ms at the end of a cold dump, the other core idle.
func (ix *dwarfIndex) want(addrs []uint64) {
	need, cis := ix.missingUnits(addrs)
	if len(need) == 0 {
		return
	}
	ix.mu.Lock()
	src := ix.source()
	ix.mu.Unlock()
	if src == nil || src.data(need...) == nil {
		return
	}
	// Parsed here even alone: want runs for each object in a goroutine
	// of its own (see Prepare), the lookups after all of them.
	workers := min(runtime.GOMAXPROCS(0), len(cis))
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 1; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(len(cis)); i = next.Add(1) - 1 {
				ix.cu(cis[i])
			}
		}()
	}
	for i := next.Add(1) - 1; i < int64(len(cis)); i = next.Add(1) - 1 {
		ix.cu(cis[i])
	}
	wg.Wait()
}

// openUnit returns the unit whose header is at off, its data, a reader
// past its compile unit entry, and that entry (nil when the unit or its
// data cannot be had).
func (src *dwarfSource) openUnit(off uint64) (unitSpan, *dwarf.Data, *dwarf.Reader, *dwarf.Entry, error) {
	u, ok := src.unitAt(off)
	if !ok {
		return u, nil, nil, nil, nil
	}
	d := src.data(off)
	if d == nil {
		return u, nil, nil, nil, nil
	}
	r := d.Reader()
	r.Seek(dwarf.Offset(u.die))
	cu, err := r.Next()
	return u, d, r, cu, err
}

// buildCU parses the line table and the inline tree of the unit whose
// header is at off.
func (ix *dwarfIndex) buildCU(src *dwarfSource, off uint64, cd *cuData) error {
	_, d, r, cu, err := src.openUnit(off)
	if err != nil || cu == nil {
		return err
	}
	stmt, _ := cu.Val(dwarf.AttrStmtList).(int64)
	ix.readLines(d, src.lineFor(stmt), cu, r.ByteOrder(), cd)
	if !cu.Children {
		return nil
	}
	type scope struct {
		parent int32 // node children attach to (-1: none)
		own    int32 // node this scope closes (-1: none)
	}
	stack := []scope{{-1, -1}}
	closeAll := func() {
		for _, s := range stack {
			if s.own >= 0 {
				cd.nodes[s.own].end = int32(len(cd.nodes))
			}
		}
	}
	for n := 0; len(stack) > 0 && n < ix.maxEntries; n++ {
		e, err := r.Next()
		if err != nil || e == nil {
			break
		}
		if e.Tag == 0 {
			s := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if s.own >= 0 {
				cd.nodes[s.own].end = int32(len(cd.nodes))
			}
			continue
		}
		parent := stack[len(stack)-1].parent
		own := int32(-1)
		descend := false
		switch e.Tag {
		case dwarf.TagSubprogram:
			rs, _ := d.Ranges(e)
			if n := addRanges(cd, rs); n > 0 {
				own = int32(len(cd.nodes))
				cd.nodes = append(cd.nodes, inlNode{name: ix.nameOf(e), rOff: uint32(len(cd.rngs)) - uint32(n), rN: uint32(n)})
				for _, rg := range cd.rngs[len(cd.rngs)-n:] {
					cd.funcs = append(cd.funcs, funcRange{rg[0], rg[1], own})
				}
				descend = true
			}
		case dwarf.TagInlinedSubroutine:
			if parent >= 0 {
				rs, _ := d.Ranges(e)
				if n := addRanges(cd, rs); n > 0 {
					own = int32(len(cd.nodes))
					file, _ := e.Val(dwarf.AttrCallFile).(int64)
					line, _ := e.Val(dwarf.AttrCallLine).(int64)
					cd.nodes = append(cd.nodes, inlNode{name: ix.nameOf(e), rOff: uint32(len(cd.rngs)) - uint32(n), rN: uint32(n),
						inline: true, callFile: clampInt32(file), callLine: clampInt32(line)})
				}
			}
			descend = true
		case dwarf.TagNamespace, dwarf.TagLexDwarfBlock, dwarf.TagModule,
			dwarf.TagClassType, dwarf.TagStructType, dwarf.TagUnionType,
			dwarf.TagTryDwarfBlock, dwarf.TagCatchDwarfBlock:
			descend = true
		}
		if !e.Children {
			if own >= 0 {
				cd.nodes[own].end = int32(len(cd.nodes))
			}
			continue
		}
		if !descend {
			r.SkipChildren()
			continue
		}
		if own >= 0 {
			stack = append(stack, scope{own, own})
		} else {
			stack = append(stack, scope{parent, -1})
		}
	}
	closeAll() // what a truncated unit left open
	slices.SortStableFunc(cd.funcs, func(a, b funcRange) int { return cmp.Compare(a.lo, b.lo) })
	cd.maxHi = prefixMax(len(cd.funcs), func(i int) uint64 { return cd.funcs[i].hi })
	return nil
}

func clampInt32(v int64) int32 {
	if v < 0 || v > 1<<31-1 {
		return 0
	}
	return int32(v)
}

// prefixMax returns m with m[i] = max(hi(0), ..., hi(i)): a lookup that
// scans backwards from the last range starting at or below pc can stop
// once m says no earlier range reaches pc.
func prefixMax(n int, hi func(int) uint64) []uint64 {
	m := make([]uint64, n)
	for i := 0; i < n; i++ {
		m[i] = hi(i)
		if i > 0 && m[i-1] > m[i] {
			m[i] = m[i-1]
		}
	}
	return m
}

// addRanges appends the usable ranges (not starting at 0, where linkers
// put discarded code, and not empty) and returns how many.
func addRanges(cd *cuData, rs [][2]uint64) int {
	n := 0
	for _, rg := range rs {
		if rg[0] != 0 && rg[1] > rg[0] {
			cd.rngs = append(cd.rngs, rg)
			n++
		}
	}
	return n
}

// readLines decodes the unit's line table into cd.files and cd.lines.
// Sequences that start at address 0 (code the linker discarded) are
// dropped.
func (ix *dwarfIndex) readLines(d *dwarf.Data, line []byte, cu *dwarf.Entry, bo binary.ByteOrder, cd *cuData) {
	off, ok := cu.Val(dwarf.AttrStmtList).(int64)
	if !ok || !lineHeaderOK(line, off, bo) {
		return
	}
	lr, err := d.LineReader(cu)
	if err != nil || lr == nil {
		return
	}
	type rawRow struct {
		addr uint64
		file *dwarf.LineFile
		line int
		end  bool
	}
	var raw []rawRow
	var le dwarf.LineEntry
	inSeq, skipSeq := false, false
	for len(raw) < 1<<24 {
		if err := lr.Next(&le); err != nil {
			if err != io.EOF {
				// Keep complete sequences only.
				for len(raw) > 0 && !raw[len(raw)-1].end {
					raw = raw[:len(raw)-1]
				}
			}
			break
		}
		if !inSeq {
			inSeq, skipSeq = true, le.Address == 0
		}
		if le.EndSequence {
			inSeq = false
		}
		if skipSeq {
			continue
		}
		raw = append(raw, rawRow{le.Address, le.File, le.Line, le.EndSequence})
	}
	files := lr.Files()
	idx := make(map[*dwarf.LineFile]int32, len(files))
	cd.files = make([]string, len(files))
	for i, f := range files {
		if f != nil {
			idx[f] = int32(i)
			cd.files[i] = f.Name
		}
	}
	cd.lines = make([]lineRow, len(raw))
	for i, r := range raw {
		row := lineRow{addr: r.addr, file: -1, line: int32(min(r.line, 1<<31-1))}
		if fi, ok := idx[r.file]; ok {
			row.file = fi
		}
		if r.end {
			row.line = -1
		}
		cd.lines[i] = row
	}
	// Sort by address; at one address a sequence's end comes before rows
	// of a sequence starting there, and rows of one sequence keep their
	// order (the last of several rows at an address is the one in force).
	slices.SortStableFunc(cd.lines, func(a, b lineRow) int {
		if a.addr != b.addr {
			return cmp.Compare(a.addr, b.addr)
		}
		switch {
		case a.line < 0 && b.line >= 0:
			return -1
		case b.line < 0 && a.line >= 0:
			return 1
		}
		return 0
	})
}

// nameOf returns the name of a subprogram or inlined call: the demangled
// linkage name (DW_AT_linkage_name, as addr2line -C prints C++ and Rust
// functions) found on the entry or along its DW_AT_abstract_origin and
// DW_AT_specification chain, else the first DW_AT_name on that chain.
func (ix *dwarfIndex) nameOf(e *dwarf.Entry) string {
	name, ref, alt := ix.entryName(e, false)
	if ref == 0 || strings.HasPrefix(name, "\x00") {
		return strings.TrimPrefix(name, "\x00")
	}
	key := nameKey{ref, alt}
	ix.namesMu.Lock()
	n, ok := ix.names[key]
	ix.namesMu.Unlock()
	if ok {
		if n == "" {
			return name
		}
		return n
	}
	n = ix.followName(ref, alt)
	ix.namesMu.Lock()
	ix.names[key] = n
	ix.namesMu.Unlock()
	if n == "" {
		return name
	}
	return n
}

// entryName returns e's own name: "\x00"+demangled linkage name when it
// has one (final), else its DW_AT_name; and the reference to follow
// (abstract origin or specification), 0 if none.
func (ix *dwarfIndex) entryName(e *dwarf.Entry, inAlt bool) (string, dwarf.Offset, bool) {
	for _, a := range []dwarf.Attr{dwarf.AttrLinkageName, attrMIPSLinkageName} {
		if s := ix.str(e, a, inAlt); s != "" {
			return "\x00" + Demangle(s), 0, false
		}
	}
	name := ix.str(e, dwarf.AttrName, inAlt)
	for _, a := range []dwarf.Attr{dwarf.AttrAbstractOrigin, dwarf.AttrSpecification} {
		f := e.AttrField(a)
		if f == nil {
			continue
		}
		off, ok := f.Val.(dwarf.Offset)
		if ok && f.Class == dwarf.ClassReference {
			return name, off, inAlt
		}
		if v, ok := f.Val.(int64); ok && f.Class == dwarf.ClassReferenceAlt && v > 0 {
			return name, dwarf.Offset(v), true
		}
	}
	return name, 0, false
}

// str returns a string attribute, reading DW_FORM_GNU_strp_alt from the
// supplementary file.
func (ix *dwarfIndex) str(e *dwarf.Entry, a dwarf.Attr, inAlt bool) string {
	f := e.AttrField(a)
	if f == nil {
		return ""
	}
	switch v := f.Val.(type) {
	case string:
		return v
	case int64:
		if f.Class == dwarf.ClassStringAlt && ix.alt != nil {
			s, _ := elfdata.CString(ix.alt.str, v)
			return s
		}
	}
	return ""
}

// followName resolves the name along a reference chain.
func (ix *dwarfIndex) followName(ref dwarf.Offset, alt bool) string {
	first := ""
	for hops := 0; ref != 0 && hops < maxNameHops; hops++ {
		var d *dwarf.Data
		if alt {
			if ix.alt == nil {
				break
			}
			d = ix.alt.d
		} else if ix.src != nil {
			d = ix.src.data(uint64(ref))
		}
		if d == nil {
			break
		}
		r := d.Reader()
		r.Seek(ref)
		e, err := r.Next()
		if err != nil || e == nil {
			break
		}
		var name string
		name, ref, alt = ix.entryName(e, alt)
		if strings.HasPrefix(name, "\x00") {
			return name[1:]
		}
		if first == "" {
			first = name
		}
	}
	return first
}

// dwarfFrame is one level of a DWARF lookup.
type dwarfFrame struct {
	name   string
	file   string
	line   int
	inline bool
	lo     uint64 // the subprogram's first address (physical frame only)
}

// lookup returns the frames at pc, innermost first, the last being the
// subprogram that contains it (or, in code that has line information but
// no subprogram, a single nameless frame with the line). ok is false when
// no unit covers pc.
func (ix *dwarfIndex) lookup(pc uint64) (frames []dwarfFrame, ok bool) {
	err := elfdata.Protect(func() error {
		frames, ok = ix.lookup1(pc)
		return nil
	})
	if err != nil {
		return nil, false
	}
	return frames, ok
}

func (ix *dwarfIndex) lookup1(pc uint64) ([]dwarfFrame, bool) {
	i := sort.Search(len(ix.ranges), func(i int) bool { return ix.ranges[i].lo > pc }) - 1
	var lineOnly []dwarfFrame
	seen := map[int32]bool{}
	for ; i >= 0; i-- {
		r := ix.ranges[i]
		if pc < r.hi && !seen[r.cu] {
			seen[r.cu] = true
			cd := ix.cu(int(r.cu))
			if fr := cd.lookup(pc); fr != nil {
				return fr, true
			}
			if lineOnly == nil {
				if file, line, ok := cd.lineAt(pc); ok {
					lineOnly = []dwarfFrame{{file: file, line: line}}
				}
			}
		}
		if i == 0 || ix.maxHi[i-1] <= pc {
			break
		}
	}
	return lineOnly, lineOnly != nil
}

// lookup finds the subprogram containing pc and the chain of inlined calls
// inside it.
func (cd *cuData) lookup(pc uint64) []dwarfFrame {
	i := sort.Search(len(cd.funcs), func(i int) bool { return cd.funcs[i].lo > pc }) - 1
	fn := int32(-1)
	for ; i >= 0; i-- {
		if pc < cd.funcs[i].hi {
			fn = cd.funcs[i].node
			break
		}
		if i == 0 || cd.maxHi[i-1] <= pc {
			break
		}
	}
	if fn < 0 {
		return nil
	}
	chain := []int32{fn}
	for j, end := fn+1, cd.nodes[fn].end; j < end && j < int32(len(cd.nodes)) && len(chain) < maxInlineDepth; {
		n := &cd.nodes[j]
		if n.inline && cd.contains(n, pc) {
			chain = append(chain, j)
			j, end = j+1, n.end
			continue
		}
		if n.end <= j {
			break // malformed
		}
		j = n.end
	}
	file, line, _ := cd.lineAt(pc)
	frames := make([]dwarfFrame, 0, len(chain))
	for k := len(chain) - 1; k >= 0; k-- {
		n := &cd.nodes[chain[k]]
		fr := dwarfFrame{name: n.name, file: file, line: line, inline: n.inline}
		if k == 0 && n.rN > 0 && int(n.rOff) < len(cd.rngs) {
			fr.lo = cd.rngs[n.rOff][0]
		}
		frames = append(frames, fr)
		// The caller's position is this call's site.
		file, line = cd.file(n.callFile), int(n.callLine)
	}
	return frames
}

func (cd *cuData) contains(n *inlNode, pc uint64) bool {
	if uint64(n.rOff)+uint64(n.rN) > uint64(len(cd.rngs)) {
		return false
	}
	for _, rg := range cd.rngs[n.rOff : n.rOff+n.rN] {
		if pc >= rg[0] && pc < rg[1] {
			return true
		}
	}
	return false
}

func (cd *cuData) file(i int32) string {
	if i < 0 || int(i) >= len(cd.files) {
		return ""
	}
	return cd.files[i]
}

// lineAt returns the line table row in force at pc.
func (cd *cuData) lineAt(pc uint64) (string, int, bool) {
	i := sort.Search(len(cd.lines), func(i int) bool { return cd.lines[i].addr > pc }) - 1
	if i < 0 || cd.lines[i].line < 0 {
		return "", 0, false
	}
	return cd.file(cd.lines[i].file), int(cd.lines[i].line), true
}

// lineHeaderOK checks what debug/dwarf trusts in a DWARF 5 line table
// header: it allocates the directory and file tables with the counts the
// header gives before reading any entry, so a corrupt count exhausts
// memory (a fatal error, not a panic). Each entry takes at least one byte
// per field, so a count larger than the bytes left in the unit, or
// entries without fields, are refused, as are forms we cannot size.
// Older versions have no counts and are left to debug/dwarf.
func lineHeaderOK(sec []byte, off int64, bo binary.ByteOrder) bool {
	if off < 0 || off >= int64(len(sec)) {
		return false
	}
	b := lineBuf{data: sec[off:], bo: bo}
	length := uint64(b.u32())
	offSize := 4
	if length == 0xffffffff {
		length, offSize = b.u64(), 8
	}
	if b.bad || length > uint64(len(b.data)) {
		return false
	}
	b.data = b.data[:length]
	version := b.u16()
	if b.bad || version < 5 {
		return !b.bad
	}
	b.skip(2)       // address_size, segment_selector_size
	b.skip(offSize) // header_length
	b.skip(5)       // minimum_instruction_length ... line_range
	opBase := b.u8()
	if opBase > 0 {
		b.skip(int(opBase) - 1)
	}
	for table := 0; table < 2 && !b.bad; table++ { // directories, then files
		nforms := int(b.u8())
		forms := make([]uint64, nforms)
		for i := range forms {
			b.uleb() // content type
			forms[i] = b.uleb()
		}
		count := b.uleb()
		if b.bad || count > 0 && (nforms == 0 || count > uint64(len(b.data))) {
			return false
		}
		for i := uint64(0); i < count && !b.bad; i++ {
			for _, f := range forms {
				if !b.skipForm(f, offSize) {
					return false
				}
			}
		}
	}
	return !b.bad
}

// lineBuf reads a line table header; bad is set on any overrun.
type lineBuf struct {
	data []byte
	bo   binary.ByteOrder
	bad  bool
}

func (b *lineBuf) skip(n int) {
	if n < 0 || n > len(b.data) {
		b.bad, b.data = true, nil
		return
	}
	b.data = b.data[n:]
}

func (b *lineBuf) take(n int) []byte {
	if n > len(b.data) {
		b.bad, b.data = true, nil
		return make([]byte, n)
	}
	v := b.data[:n]
	b.data = b.data[n:]
	return v
}

func (b *lineBuf) u8() uint8   { return b.take(1)[0] }
func (b *lineBuf) u16() uint16 { return b.bo.Uint16(b.take(2)) }
func (b *lineBuf) u32() uint32 { return b.bo.Uint32(b.take(4)) }
func (b *lineBuf) u64() uint64 { return b.bo.Uint64(b.take(8)) }

func (b *lineBuf) uleb() uint64 {
	v, n := binary.Uvarint(b.data)
	if n <= 0 {
		b.bad, b.data = true, nil
		return 0
	}
	b.data = b.data[n:]
	return v
}

// skipForm skips one attribute value of form f (the forms line table
// headers use); false for a form it does not know.
func (b *lineBuf) skipForm(f uint64, offSize int) bool {
	switch f {
	case 0x08: // string
		i := bytes.IndexByte(b.data, 0)
		if i < 0 {
			return false
		}
		b.skip(i + 1)
	case 0x0e, 0x1f, 0x17, 0x1d: // strp, line_strp, sec_offset, strp_sup
		b.skip(offSize)
	case 0x0f, 0x1a: // udata, strx
		b.uleb()
	case 0x0d: // sdata
		b.uleb()
	case 0x0b, 0x25: // data1, strx1
		b.skip(1)
	case 0x05, 0x26: // data2, strx2
		b.skip(2)
	case 0x27: // strx3
		b.skip(3)
	case 0x06, 0x28: // data4, strx4
		b.skip(4)
	case 0x07: // data8
		b.skip(8)
	case 0x1e: // data16
		b.skip(16)
	case 0x09: // block
		b.skip(int(min(b.uleb(), 1<<31)))
	case 0x0a: // block1
		b.skip(int(b.u8()))
	case 0x03: // block2
		b.skip(int(b.u16()))
	case 0x04: // block4
		b.skip(int(min(uint64(b.u32()), 1<<31)))
	default:
		return false
	}
	return !b.bad
}
