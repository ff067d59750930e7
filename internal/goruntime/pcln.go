package goruntime

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/rewindstack/rewind/internal/elfdata"
)

// goTable reads a Go binary's runtime symbol table (.gopclntab, the "pcln
// table" that the runtime itself uses for tracebacks): functions, their
// file:line tables and their inline trees. It handles the Go 1.20+ layout
// (magic 0xfffffff1), which Go 1.26 still writes.
//
// debug/gosym reads the same table but does not expose the inline trees
// (FUNCDATA_InlTree and PCDATA_InlTreeIndex) and builds a Func for every
// function up front; this reader decodes one function at a time, on
// demand, straight from the section bytes. Layout facts are from
// runtime/symtab.go, runtime/symtabinl.go, runtime/runtime2.go (_func) and
// internal/abi/symtab.go of Go 1.26.
//
// Every read is bounds-checked; a malformed table makes lookups fail, never
// panic.
type goTable struct {
	bo      binary.ByteOrder
	ptrSize int
	quantum uint64
	nfunc   int

	funcnames []byte
	cutab     []byte
	filetab   []byte
	pctab     []byte
	functab   []byte // the "pclntab" part: ftab followed by the _func records
	// pctabOff and functabOff are where pctab and functab start in the
	// table, for errors.
	pctabOff, functabOff uint64

	text uint64 // moduledata.text: function entries are offsets from it
	// gofunc is the data at moduledata.gofunc (go:func.*), which funcdata
	// offsets are relative to; nil when it could not be located (then no
	// inline trees are reported).
	gofunc []byte

	wrapOnce sync.Once
	wrapID   int // abi.FuncIDWrapper of this binary's Go version, -1 if unknown
}

// Offsets and indexes of the Go 1.20+ formats.
const (
	goMagic120          = 0xfffffff1
	goFuncHeader        = 44 // bytes of _func before pcdata[]
	goPCDataInlTreeIdx  = 2  // abi.PCDATA_InlTreeIndex
	goFuncDataInlTree   = 3  // abi.FUNCDATA_InlTree
	goInlinedCallSize   = 16 // sizeof(runtime.inlinedCall)
	goFuncIDOffset      = 40 // _func.funcID
	goFuncFlagOffset    = 41 // _func.flag
	goFuncPCSPOffset    = 16 // _func.pcsp
	goModTextWord       = 22 // moduledata.text, in pointer-sized words
	goModGofuncWord     = 40 // moduledata.gofunc (Go 1.20 to 1.26)
	goModGofuncWord127  = 43 // moduledata.gofunc (Go 1.27)
	goModFuncnameWord   = 1  // moduledata.funcnametab.ptr
	goMaxInlineDepth    = 256
	goMaxPCValueEntries = 1 << 20
)

var errNotGo = errors.New("no Go pcln table")

// mapSection returns an uncompressed section's bytes mapped read-only from
// its file, or nil when they cannot be (not a regular file, compressed,
// mmap refused). A Go program's pcln table is megabytes, kept as long as
// the program's table: read into the heap, the tables of the Go
// programs a 318 MB system-wide recording sampled (compilers, linkers,
// test binaries) were half of what rewind report held, 60 MB, where a
// mapping's pages are the page cache's. The mapping is never removed (a
// table lives as long as its module, a process's objects in practice).
func mapSection(s *elf.Section) []byte {
	if s.Flags&elf.SHF_COMPRESSED != 0 || s.Type == elf.SHT_NOBITS || s.Size == 0 || s.Size != s.FileSize || s.Size > elfdata.MaxSection {
		return nil
	}
	// The section reads from the object's reader, itself a part of the
	// file: find the file and the section's offset in it.
	var r io.ReaderAt = s.ReaderAt
	var off int64
	for {
		sr, ok := r.(*io.SectionReader)
		if !ok {
			break
		}
		outer, o, _ := sr.Outer()
		r, off = outer, off+o
	}
	f, ok := r.(*os.File)
	if !ok {
		return nil
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || off < 0 || off+int64(s.Size) > st.Size() {
		return nil
	}
	page := int64(os.Getpagesize())
	start := off &^ (page - 1)
	m, err := unix.Mmap(int(f.Fd()), start, int(off-start+int64(s.Size)), unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		return nil
	}
	return m[off-start : len(m) : len(m)]
}

// openGoTable finds the pcln table of ef: the .gopclntab section, or the
// range runtime.pclntab..runtime.epclntab of the symbol table.
func openGoTable(ef *elf.File) (*goTable, error) {
	var data []byte
	var addr uint64
	var syms []elf.Symbol
	symsLoaded := false
	loadSyms := func() []elf.Symbol {
		if !symsLoaded {
			syms, _ = ef.Symbols()
			symsLoaded = true
		}
		return syms
	}
	if s := ef.Section(".gopclntab"); s != nil && s.Type != elf.SHT_NOBITS {
		d := mapSection(s)
		if d == nil {
			var err error
			if d, err = elfdata.Section(s); err != nil {
				return nil, err
			}
		}
		data, addr = d, s.Addr
	} else {
		// Without .gopclntab (external linking puts the table in
		// .data.rel.ro), only a Go binary's marker sections justify reading
		// the symbol table, which is costly for large C libraries.
		if ef.Section(".go.buildinfo") == nil && ef.Section(".note.go.buildid") == nil {
			return nil, errNotGo
		}
		var start, end uint64
		for _, sym := range loadSyms() {
			switch sym.Name {
			case "runtime.pclntab":
				start = sym.Value
			case "runtime.epclntab":
				end = sym.Value
			}
		}
		if start == 0 || end <= start {
			return nil, errNotGo
		}
		d, err := sectionBytes(ef, start, end-start)
		if err != nil {
			return nil, err
		}
		data, addr = d, start
	}
	t, err := parseGoHeader(data)
	if err != nil {
		return nil, err
	}
	// Where are text and go:func.*? The symbol table names both; a
	// stripped binary still has its moduledata, which points at both.
	var gofuncAddr uint64
	for _, sym := range loadSyms() {
		switch sym.Name {
		case "runtime.text":
			t.text = sym.Value
		case "go:func.*":
			gofuncAddr = sym.Value
		}
	}
	if t.text == 0 || gofuncAddr == 0 {
		if text, gofunc, ok := t.fromModuledata(ef, addr, data); ok {
			if t.text == 0 {
				t.text = text
			}
			if gofuncAddr == 0 {
				gofuncAddr = gofunc
			}
		}
	}
	if t.text == 0 {
		if s := ef.Section(".text"); s != nil {
			t.text = s.Addr
		}
	}
	if gofuncAddr != 0 {
		if gofuncAddr >= addr && gofuncAddr-addr < uint64(len(data)) {
			t.gofunc = data[gofuncAddr-addr:]
		} else if s := sectionAt(ef, gofuncAddr); s != nil {
			if d, err := elfdata.Section(s); err == nil {
				t.gofunc = d[gofuncAddr-s.Addr:]
			}
		}
	}
	return t, nil
}

// parseGoHeader reads the pcHeader and slices the sub-tables.
func parseGoHeader(data []byte) (*goTable, error) {
	if len(data) < 8 || data[4] != 0 || data[5] != 0 {
		return nil, errNotGo
	}
	t := &goTable{quantum: uint64(data[6]), ptrSize: int(data[7])}
	switch {
	case binary.LittleEndian.Uint32(data) == goMagic120:
		t.bo = binary.LittleEndian
	case binary.BigEndian.Uint32(data) == goMagic120:
		t.bo = binary.BigEndian
	default:
		return nil, fmt.Errorf("pcln table magic %#x is not Go 1.20+", binary.LittleEndian.Uint32(data))
	}
	if t.quantum != 1 && t.quantum != 2 && t.quantum != 4 || t.ptrSize != 4 && t.ptrSize != 8 {
		return nil, errors.New("bad pcln table header")
	}
	word := func(i int) (uint64, bool) {
		off := 8 + i*t.ptrSize
		if off+t.ptrSize > len(data) {
			return 0, false
		}
		if t.ptrSize == 4 {
			return uint64(t.bo.Uint32(data[off:])), true
		}
		return t.bo.Uint64(data[off:]), true
	}
	// Words: nfunc, nfiles, (unused), funcnameOffset, cuOffset,
	// filetabOffset, pctabOffset, pclnOffset.
	var offs [8]uint64
	for i := range offs {
		v, ok := word(i)
		if !ok {
			return nil, errors.New("truncated pcln table header")
		}
		offs[i] = v
	}
	sub := func(off uint64) []byte {
		if off > uint64(len(data)) {
			return nil
		}
		return data[off:]
	}
	t.funcnames, t.cutab, t.filetab, t.pctab, t.functab = sub(offs[3]), sub(offs[4]), sub(offs[5]), sub(offs[6]), sub(offs[7])
	t.pctabOff, t.functabOff = offs[6], offs[7]
	if offs[0] > uint64(len(t.functab)/8) || t.functab == nil || t.funcnames == nil {
		return nil, errors.New("bad pcln table offsets")
	}
	t.nfunc = int(offs[0])
	return t, nil
}

// fromModuledata finds runtime.firstmoduledata (the .go.module section,
// or a scan of the data sections for a record whose first words point at
// the pcln table and its function name table) and reads moduledata.text
// and moduledata.gofunc from it. The word offsets are those of Go 1.26's
// moduledata, so the result is checked for plausibility. It fails for
// position-independent binaries, whose moduledata pointers are only
// filled in by relocation at load time.
func (t *goTable) fromModuledata(ef *elf.File, pclnAddr uint64, pcln []byte) (text, gofunc uint64, ok bool) {
	funcnameAddr := pclnAddr + uint64(len(pcln)-len(t.funcnames))
	ptr := func(b []byte, i int) uint64 {
		if t.ptrSize == 4 {
			return uint64(t.bo.Uint32(b[i*4:]))
		}
		return t.bo.Uint64(b[i*8:])
	}
	need := (goModGofuncWord127 + 1) * t.ptrSize
	for _, name := range []string{".go.module", ".noptrdata", ".data"} {
		s := ef.Section(name)
		if s == nil || s.Type == elf.SHT_NOBITS {
			continue
		}
		d, err := elfdata.Section(s)
		if err != nil {
			continue
		}
		for off := 0; off+need <= len(d); off += t.ptrSize {
			md := d[off:]
			if ptr(md, 0) != pclnAddr || ptr(md, goModFuncnameWord) != funcnameAddr {
				continue
			}
			text = ptr(md, goModTextWord)
			if ts := sectionAt(ef, text); ts == nil || ts.Flags&elf.SHF_EXECINSTR == 0 {
				return 0, 0, false
			}
			// Go 1.27 added three words before rodata and gofunc: the
			// right layout is the one whose rodata and gofunc both
			// point into data sections, in that order.
			for _, w := range []int{goModGofuncWord, goModGofuncWord127} {
				rodata, gofunc := ptr(md, w-1), ptr(md, w)
				if rs, gs := sectionAt(ef, rodata), sectionAt(ef, gofunc); rs != nil && gs != nil &&
					rodata <= gofunc && gs.Flags&elf.SHF_EXECINSTR == 0 {
					return text, gofunc, true
				}
			}
			return 0, 0, false
		}
	}
	return 0, 0, false
}

// sectionAt returns the allocated section containing vaddr.
func sectionAt(ef *elf.File, vaddr uint64) *elf.Section {
	for _, s := range ef.Sections {
		if s.Flags&elf.SHF_ALLOC != 0 && s.Type != elf.SHT_NOBITS && vaddr >= s.Addr && vaddr-s.Addr < s.Size {
			return s
		}
	}
	return nil
}

// sectionBytes reads n bytes at vaddr from the section that holds them.
func sectionBytes(ef *elf.File, vaddr, n uint64) ([]byte, error) {
	s := sectionAt(ef, vaddr)
	if s == nil || n > s.Size-(vaddr-s.Addr) {
		return nil, fmt.Errorf("%#x: not in a section", vaddr)
	}
	d, err := elfdata.Section(s)
	if err != nil {
		return nil, err
	}
	return d[vaddr-s.Addr : vaddr-s.Addr+n], nil
}

// goFunc is one decoded _func record.
type goFunc struct {
	entry    uint64
	end      uint64
	nameOff  int32
	pcfile   uint32
	pcln     uint32
	npcdata  uint32
	cuOffset uint32
	nfuncdat uint8
	rec      []byte // the record, from its start
}

func (t *goTable) u32(b []byte, off int) (uint32, bool) {
	if off < 0 || off+4 > len(b) {
		return 0, false
	}
	return t.bo.Uint32(b[off:]), true
}

// find returns the function containing pc.
func (t *goTable) find(pc uint64) (goFunc, bool) {
	var f goFunc
	if pc < t.text || pc-t.text >= 1<<32 {
		return f, false
	}
	off := uint32(pc - t.text)
	// ftab: nfunc+1 pairs of (entryoff, funcoff), the last one marking
	// the end of the text.
	last, ok := t.u32(t.functab, t.nfunc*8)
	if !ok || off >= last {
		return f, false
	}
	i := sort.Search(t.nfunc, func(i int) bool {
		e, _ := t.u32(t.functab, i*8)
		return e > off
	}) - 1
	if i < 0 {
		return f, false
	}
	entry, _ := t.u32(t.functab, i*8)
	next, _ := t.u32(t.functab, (i+1)*8)
	fo, ok := t.u32(t.functab, i*8+4)
	if !ok || int(fo) < 0 || int(fo)+goFuncHeader > len(t.functab) {
		return f, false
	}
	rec := t.functab[fo:]
	if e := t.bo.Uint32(rec); e != entry {
		return f, false // the record disagrees with the table
	}
	f = goFunc{
		entry:    t.text + uint64(entry),
		end:      t.text + uint64(next),
		nameOff:  int32(t.bo.Uint32(rec[4:])),
		pcfile:   t.bo.Uint32(rec[20:]),
		pcln:     t.bo.Uint32(rec[24:]),
		npcdata:  t.bo.Uint32(rec[28:]),
		cuOffset: t.bo.Uint32(rec[32:]),
		nfuncdat: rec[43],
		rec:      rec,
	}
	return f, true
}

func (t *goTable) funcName(nameOff int32) string {
	s, _ := elfdata.CString(t.funcnames, int64(nameOff))
	return s
}

// pcvalue decodes the pc-value table at off in pctab for f and returns its
// value at pc (-1 and false when there is no table or pc is not covered).
func (t *goTable) pcvalue(f *goFunc, off uint32, pc uint64) (int32, bool) {
	v, _, msg := t.pcvalueAt(f, off, pc)
	return v, msg == ""
}

// pcvalueAt is pcvalue saying why it failed: msg is empty on success,
// else it says what is wrong at offset bad of pctab. Each step is a
// zig-zag varint value delta and a varint pc delta (in units of the
// instruction quantum); a zero value delta after the first step ends the
// table.
func (t *goTable) pcvalueAt(f *goFunc, off uint32, pc uint64) (val int32, bad uint64, msg string) {
	if off == 0 {
		return -1, 0, "no table"
	}
	if uint64(off) >= uint64(len(t.pctab)) {
		return -1, uint64(off), "table offset beyond pctab"
	}
	p := t.pctab[off:]
	val = int32(-1)
	cur := f.entry
	// Every step but the first advances the pc, so a table has at most
	// one step per instruction quantum of the function.
	steps := min(goMaxPCValueEntries, (f.end-f.entry)/t.quantum+2)
	at := func() uint64 { return uint64(len(t.pctab) - len(p)) }
	for n := uint64(0); n < steps; n++ {
		uv, k := binary.Uvarint(p)
		if k <= 0 || uv > 1<<32-1 {
			return -1, at(), "bad value delta"
		}
		if uv == 0 && n > 0 {
			return -1, at(), "table ends before the pc"
		}
		p = p[k:]
		u := uint32(uv)
		val += int32(-(u & 1) ^ (u >> 1))
		pd, k := binary.Uvarint(p)
		if k <= 0 || pd > 1<<32-1 {
			return -1, at(), "bad pc delta"
		}
		p = p[k:]
		cur += pd * t.quantum
		if pc < cur {
			return val, 0, ""
		}
	}
	return -1, at(), "table longer than its function"
}

// fileLine returns the source position of pc in f.
func (t *goTable) fileLine(f *goFunc, pc uint64) (string, int) {
	fileno, ok1 := t.pcvalue(f, f.pcfile, pc)
	line, ok2 := t.pcvalue(f, f.pcln, pc)
	if !ok1 || !ok2 || fileno < 0 {
		return "", 0
	}
	fo, ok := t.u32(t.cutab, int(f.cuOffset+uint32(fileno))*4)
	if !ok || fo == ^uint32(0) {
		return "", int(line)
	}
	file, _ := elfdata.CString(t.filetab, int64(fo))
	return file, int(line)
}

// pcdata returns the offset of f's pcdata table i (0 if none).
func (t *goTable) pcdata(f *goFunc, i uint32) uint32 {
	if i >= f.npcdata {
		return 0
	}
	v, _ := t.u32(f.rec, goFuncHeader+int(i)*4)
	return v
}

// inlTree returns f's inline tree (FUNCDATA_InlTree), or nil.
func (t *goTable) inlTree(f *goFunc) []byte {
	if t.gofunc == nil || f.nfuncdat <= goFuncDataInlTree || f.npcdata > 1<<16 {
		return nil
	}
	off, ok := t.u32(f.rec, goFuncHeader+int(f.npcdata)*4+goFuncDataInlTree*4)
	if !ok || off == ^uint32(0) || uint64(off) >= uint64(len(t.gofunc)) {
		return nil
	}
	return t.gofunc[off:]
}

// Frame is one function at an address of a Go program, as its pcln table
// names it: an inlined call or the physical function.
type Frame struct {
	// Function is the name as the runtime prints it (PrintName).
	Function string
	// Offset is the address's offset into the physical function (0 for
	// inlined entries).
	Offset uint64
	// File and Line are the position of the address (innermost entry)
	// or of the call inlined into the entry (outer ones).
	File string
	Line int
	// Inlined marks an inlined call.
	Inlined bool
	// Wrapper marks compiler-generated code (abi.FuncIDWrapper), which
	// Go's tracebacks elide.
	Wrapper bool
}

// lookup resolves pc to its frames, innermost first: one Frame per
// inlined call (from the inline tree, walking from the entry that
// PCDATA_InlTreeIndex names at pc to its parents through each entry's
// parentPc) and finally the physical function. Each entry's file:line is
// the position of the current pc, which for outer entries is the parentPc
// of the call inlined into them, as runtime.CallersFrames reports.
func (t *goTable) lookup(pc uint64) ([]Frame, bool) {
	f, ok := t.find(pc)
	if !ok {
		return nil, false
	}
	var locs []Frame
	tree := t.inlTree(&f)
	idxTab := t.pcdata(&f, goPCDataInlTreeIdx)
	cur := pc
	if tree != nil && idxTab != 0 {
		ix, _ := t.pcvalue(&f, idxTab, cur)
		for depth := 0; ix >= 0 && depth < goMaxInlineDepth; depth++ {
			rec := int(ix) * goInlinedCallSize
			if rec+goInlinedCallSize > len(tree) {
				break
			}
			nameOff := int32(t.bo.Uint32(tree[rec+4:]))
			parentPC := int32(t.bo.Uint32(tree[rec+8:]))
			file, line := t.fileLine(&f, cur)
			locs = append(locs, Frame{Function: PrintName(t.funcName(nameOff)), File: file, Line: line, Inlined: true,
				Wrapper: int(tree[rec]) == t.wrapperID()})
			next := f.entry + uint64(int64(parentPC))
			if parentPC < 0 || next >= f.end {
				break
			}
			cur = next
			ix, _ = t.pcvalue(&f, idxTab, cur)
		}
	}
	file, line := t.fileLine(&f, cur)
	locs = append(locs, Frame{Function: PrintName(t.funcName(f.nameOff)), Offset: pc - f.entry, File: file, Line: line,
		Wrapper: int(f.rec[goFuncIDOffset]) == t.wrapperID()})
	return locs, true
}

// PrintName shortens a generic function's shape arguments to "[...]",
// as the runtime prints names (funcNameForPrint).
func PrintName(name string) string {
	i := strings.IndexByte(name, '[')
	if i < 0 {
		return name
	}
	j := len(name) - 1
	for j > i && name[j] != ']' {
		j--
	}
	if j <= i {
		return name
	}
	return name[:i] + "[...]" + name[j+1:]
}
