// Package elfobj opens ELF executables and shared objects and exposes what
// stack unwinding needs from them: the PT_LOAD layout (to relate runtime
// addresses to file addresses), the build-id and .gnu_debuglink (to find
// separate debug files), the unwind tables (.eh_frame, .eh_frame_hdr,
// .debug_frame, .sframe), .got.plt and .text, and a compact function symbol
// table for symbolization.
//
// Files may be hostile. Every size read from the file is checked against the
// file's length before anything is allocated for it, compressed sections are
// decompressed with a size limit, and panics inside debug/elf are turned into
// errors. Every error names the file ("elfobj: /path: ...").
//
// A File is safe for concurrent use by multiple goroutines once NewFile or
// Open has returned.
package elfobj

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/rewindstack/rewind/internal/fileerr"
	"github.com/rewindstack/rewind/internal/fsafe"
	"github.com/rewindstack/rewind/internal/readat"
	"github.com/rewindstack/rewind/regs"
)

// Section is one ELF section's placement and contents.
type Section struct {
	// Name is the section name, such as ".eh_frame".
	Name string
	// Addr is sh_addr: the section's virtual address in the file's own
	// address space (before any load bias).
	Addr uint64
	// Offset is the section's offset in the file.
	Offset uint64
	// Size is the size of the section's contents in memory (decompressed
	// size for a compressed section). It is known even while Data is not
	// loaded.
	Size uint64
	// Data holds the contents, decompressed if the section is compressed
	// (SHF_COMPRESSED with zlib or zstd, or a legacy .zdebug section). It is
	// nil until the section is loaded: see Load.
	Data []byte

	load *lazyLoad
}

// lazyLoad loads a section's Data once.
type lazyLoad struct {
	once sync.Once
	fn   func() ([]byte, error)
	err  error
}

// Load returns the section's contents, reading them from the file the first
// time (they are then kept in Data). Open and NewFile load every section
// they expose except Text, which is usually large and rarely needed whole;
// callers that need its bytes call f.Text.Load() (or use File.ReadVaddr).
// Load is safe for concurrent use, but Data must not be read directly while
// another goroutine may be running the first Load.
func (s *Section) Load() ([]byte, error) {
	if s.load == nil {
		return s.Data, nil
	}
	s.load.once.Do(func() {
		s.Data, s.load.err = s.load.fn()
		s.load.fn = nil
	})
	return s.Data, s.load.err
}

// Segment is one program header of type PT_LOAD.
type Segment struct {
	// Vaddr is p_vaddr, the segment's virtual address in the file's own
	// address space.
	Vaddr uint64
	// Memsz is p_memsz, the segment's size in memory.
	Memsz uint64
	// Offset is p_offset, where the segment's bytes start in the file.
	Offset uint64
	// Filesz is p_filesz, how many bytes the file holds for the segment;
	// memory beyond that up to Memsz is zero-filled.
	Filesz uint64
	// Align is p_align.
	Align uint64
	// Flags are the segment's permissions (PF_R, PF_W, PF_X).
	Flags elf.ProgFlag
}

// File is an opened ELF file.
type File struct {
	// Path names the file in errors; Open sets it to the path it opened.
	Path string
	// Arch is regs.AMD64 or regs.ARM64, or regs.Unknown for any other
	// machine (such files still load; only unwinding cannot use them).
	Arch regs.Arch
	// Machine is e_machine.
	Machine elf.Machine
	// ByteOrder is the file's byte order.
	ByteOrder binary.ByteOrder
	// Class is ELFCLASS32 or ELFCLASS64.
	Class elf.Class
	// Type is e_type (ET_EXEC, ET_DYN, ET_CORE, ...).
	Type elf.Type
	// Entry is e_entry.
	Entry uint64
	// BuildID is the descriptor of the NT_GNU_BUILD_ID note, from a PT_NOTE
	// segment or, failing that, a note section; nil if there is none.
	BuildID []byte
	// Loads are the PT_LOAD program headers in file order.
	Loads []Segment

	// EhFrame is .eh_frame, nil when absent (or SHT_NOBITS, as in a
	// separate debug file).
	EhFrame *Section
	// EhFrameHdr is .eh_frame_hdr; when the file has no section headers it
	// is taken from the PT_GNU_EH_FRAME program header (Name is then
	// ".eh_frame_hdr" too).
	EhFrameHdr *Section
	// DebugFrame is .debug_frame (or the legacy compressed .zdebug_frame),
	// decompressed.
	DebugFrame *Section
	// SFrame is .sframe.
	SFrame *Section
	// GotPlt is .got.plt.
	GotPlt *Section
	// Text is .text. Its Data is not loaded by Open; call f.Text.Load().
	Text *Section

	// Go reports a Go binary: it has a .gopclntab, .go.buildinfo or
	// .note.go.buildid section.
	Go bool

	// DebugLink is the file name recorded in .gnu_debuglink, "" if none.
	DebugLink string
	// DebugLinkCRC is the CRC-32 recorded in .gnu_debuglink.
	DebugLinkCRC uint32

	r      io.ReaderAt
	size   int64 // file length, -1 if unknown
	closer io.Closer
	file   *os.File      // the file Open opened (nil for NewFile), for mapRange
	read   atomic.Uint64 // bytes allocated by readAt so far, for maxTotalRead
	ef     *elf.File
	secs   []secInfo

	symOnce sync.Once
	syms    *symtab
	symErr  error

	pltOnce sync.Once
	plt     *pltTable
}

// secInfo is what loading sections and symbols needs to know about a
// section.
type secInfo struct {
	typ    elf.SectionType
	flags  elf.SectionFlag
	addr   uint64
	size   uint64
	offset uint64
	link   uint32
	entsz  uint64
	comp   bool
	name   string
	elfSec *elf.Section
}

// maxDecompressed caps the size of any decompressed section, and
// maxRatio caps how much larger than its compressed form it may be (zlib
// cannot exceed about 1032:1, so honest zlib data never hits the ratio).
const (
	maxDecompressed = 1 << 30
	maxRatio        = 2048
)

// Open opens the ELF file at path. The file stays open until Close, because
// Text, symbols and ReadVaddr read from it on demand.
func Open(path string) (*File, error) {
	// Paths come from /proc maps, cores and perf.data: never block on a
	// FIFO or open a device named there.
	fh, st, err := fsafe.Open(path)
	if err != nil {
		return nil, fmt.Errorf("elfobj: %w", err)
	}
	f, err := newFile(io.NewSectionReader(fh, 0, st.Size()), path, fh)
	if err != nil {
		fh.Close()
		return nil, err
	}
	f.closer = fh
	return f, nil
}

// NewFile reads an ELF file from r; path is only used to name the file in
// errors and in File.Path. If r has a Size() int64 method (as
// *io.SectionReader and *bytes.Reader do) or is a regular *os.File, sizes in
// the file are checked against its length before allocating; otherwise reads
// grow only as data arrives. The caller keeps r valid for the File's
// lifetime.
func NewFile(r io.ReaderAt, path string) (*File, error) {
	return newFile(r, path, nil)
}

// newFile is NewFile; file, when not nil, is the file r reads (from its
// start), which large sections may be mapped from (see MapSections).
func newFile(r io.ReaderAt, path string, file *os.File) (*File, error) {
	f := &File{Path: path, r: r, size: -1, file: file}
	switch v := r.(type) {
	case interface{ Size() int64 }:
		f.size = v.Size()
	case interface{ Stat() (os.FileInfo, error) }:
		if st, err := v.Stat(); err == nil && st.Mode().IsRegular() {
			f.size = st.Size()
		}
	}
	if err := f.precheck(); err != nil {
		return nil, err
	}
	var ef *elf.File
	err := protect(func() error {
		var err error
		ef, err = elf.NewFile(r)
		return err
	})
	if err != nil {
		return nil, f.debugELFError(err)
	}
	f.ef = ef
	f.Machine = ef.Machine
	f.ByteOrder = ef.ByteOrder
	f.Class = ef.Class
	f.Type = ef.Type
	f.Entry = ef.Entry
	switch {
	case ef.Machine == elf.EM_X86_64 && ef.Class == elf.ELFCLASS64:
		f.Arch = regs.AMD64 // (ELFCLASS32 x86-64 is the x32 ABI: unknown)
	case ef.Machine == elf.EM_AARCH64 && ef.Class == elf.ELFCLASS64:
		f.Arch = regs.ARM64
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD {
			f.Loads = append(f.Loads, Segment{
				Vaddr: p.Vaddr, Memsz: p.Memsz, Offset: p.Off,
				Filesz: p.Filesz, Align: p.Align, Flags: p.Flags,
			})
		}
	}
	f.secs = make([]secInfo, len(ef.Sections))
	for i, s := range ef.Sections {
		si := secInfo{
			typ: s.Type, flags: s.Flags, addr: s.Addr, size: s.Size,
			offset: s.Offset, link: s.Link, entsz: s.Entsize,
			comp: s.Flags&elf.SHF_COMPRESSED != 0, name: s.Name, elfSec: s,
		}
		if !si.comp && strings.HasPrefix(s.Name, ".zdebug") {
			si.size, si.comp = f.zdebugSize(s)
			if !si.comp {
				si.size = s.Size
			}
		}
		f.secs[i] = si
	}
	if err := f.loadSections(); err != nil {
		return nil, err
	}
	if err := f.readBuildID(); err != nil {
		return nil, err
	}
	if err := f.readDebugLink(); err != nil {
		return nil, err
	}
	return f, nil
}

// Close releases the file opened by Open. Sections already loaded stay
// usable; anything read on demand (Text, symbols not yet built, ReadVaddr)
// fails afterwards. Close must not run concurrently with other methods. It
// is a no-op for files made by NewFile.
func (f *File) Close() error {
	if f.closer == nil {
		return nil
	}
	err := f.closer.Close()
	f.closer, f.file = nil, nil
	f.r = closedReader{}
	if err != nil {
		return f.errorf("close: %v", err)
	}
	return nil
}

// closedReader replaces the reader after Close.
type closedReader struct{}

func (closedReader) ReadAt([]byte, int64) (int, error) { return 0, os.ErrClosed }

// BuildIDHex returns the build-id as lowercase hex ("" if none).
func (f *File) BuildIDHex() string {
	return hex.EncodeToString(f.BuildID)
}

// FormatError reports a malformed ELF file: its path, the section or
// header concerned, the byte offset (in that section, or in the file when
// no section is named) and what is wrong. It is the FormatError of every
// rewind parser (cfi, sframe, perfdata, corefile report theirs with the
// same type).
type FormatError = fileerr.FormatError

// formatf returns a FormatError about section (or header) sec at offset
// off, wrapping err when it is not nil.
func (f *File) formatf(sec string, off uint64, err error, format string, args ...any) error {
	return &FormatError{Pkg: "elfobj", File: f.Path, Section: sec, Offset: off, Msg: fmt.Sprintf(format, args...), Err: err}
}

// debugELFError turns an error of debug/elf into a FormatError, keeping
// the offset debug/elf's message gives ("... in record at byte 0x40").
func (f *File) debugELFError(err error) error {
	var off uint64
	if m := atByte().FindStringSubmatch(err.Error()); m != nil {
		off, _ = strconv.ParseUint(m[1], 0, 64)
	}
	return f.formatf("", off, err, "malformed ELF file")
}

var atByte = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`at byte (0x[0-9a-fA-F]+)`) })

// errorf formats an error that names the file.
func (f *File) errorf(format string, args ...any) error {
	return fmt.Errorf("elfobj: %s: %s", f.Path, fmt.Sprintf(format, args...))
}

// wrapf is errorf for an underlying error that callers may want to inspect
// with errors.Is.
func (f *File) wrapf(err error, format string, args ...any) error {
	return fmt.Errorf("elfobj: %s: %s: %w", f.Path, fmt.Sprintf(format, args...), err)
}

// protect runs fn, turning a panic into an error.
func protect(fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("malformed ELF file (debug/elf panicked: %v)", p)
		}
	}()
	return fn()
}

// MapSections makes the sections and tables that files opened by Open
// read from then on, where they are at least mapMin bytes, be mapped from
// the file (read-only, populated from the page cache in the same system
// call) instead of copied into fresh memory: libc's .eh_frame is 45 pages
// a dump would touch, each a page fault, and page faults are what a dump
// pays most for on a VM. The mappings are never unmapped (the data may be
// kept beyond the File), so it is for commands that end when their work
// does (dump; report, whose bound on anonymous memory the mapped pages
// do not count against); and the file must not be truncated while they
// are read (as for any mapped file, that faults: dump maps files mapped
// by the target, which the target itself would fault on; perf report
// maps the files it reads too). It does nothing where mapping is not
// supported.
func MapSections(on bool) { mapSections.Store(on) }

var mapSections atomic.Bool

// mapMin is the smallest read MapSections maps: below it a copy costs a
// page or two, as the mapping would.
const mapMin = 16 << 10

// maxRead caps one read of a section or table from the file, and
// maxTotalRead all of them for one File.
const (
	maxRead      = 1 << 30
	maxTotalRead = 2 << 30
)

// ErrTooLarge is wrapped by the error for a section or table larger than
// rewind reads (1 GiB at once, 2 GiB per file).
var ErrTooLarge = errors.New("too large to read")

// errShort is returned (wrapped) when the file is shorter than a header says.
var errShort = errors.New("beyond end of file")

// readAt reads n bytes at off. With a known file size it checks the range
// first; otherwise it reads in bounded chunks so that a lying size costs at
// most what the file really holds.
func (f *File) readAt(off, n uint64) ([]byte, error) {
	if n == 0 {
		return []byte{}, nil
	}
	if off > 1<<62 || n > 1<<62 {
		return nil, fmt.Errorf("offset %#x: size %#x: %w", off, n, errShort)
	}
	// Sizes are checked against the file's, but a sparse file can be
	// larger than memory: cap every read, and all reads together.
	// Sizes beyond the end of the file fail below (errShort).
	if beyond := f.size >= 0 && (off > uint64(f.size) || n > uint64(f.size)-off); !beyond {
		if n > maxRead {
			return nil, fmt.Errorf("offset %#x: %d bytes: %w (at most %d bytes are read at once)", off, n, ErrTooLarge, uint64(maxRead))
		}
		if total := f.read.Add(n); total > maxTotalRead {
			f.read.Add(-n)
			return nil, fmt.Errorf("offset %#x: %d bytes: %w (%d bytes read already, at most %d in all)", off, n, ErrTooLarge, total-n, uint64(maxTotalRead))
		}
	}

	if f.size >= 0 {
		if off > uint64(f.size) || n > uint64(f.size)-off {
			return nil, fmt.Errorf("offset %#x: %d bytes: %w (file size %d)", off, n, errShort, f.size)
		}
		if n >= mapMin && f.file != nil && mapSections.Load() {
			if b := mapRange(f.file, off, n); b != nil {
				f.read.Add(-n) // nothing allocated
				return b, nil
			}
		}
		buf := make([]byte, n)
		if err := readat.Full(f.r, buf, off); err != nil {
			return nil, fmt.Errorf("offset %#x: %w", off, err)
		}
		return buf, nil
	}
	const chunk = 1 << 20
	var buf []byte
	for got := uint64(0); got < n; {
		c := min(n-got, chunk)
		start := len(buf)
		buf = append(buf, make([]byte, c)...)
		if err := readat.Full(f.r, buf[start:], off+got); err != nil {
			return nil, fmt.Errorf("offset %#x: %w", off+got, err)
		}
		got += c
	}
	return buf, nil
}

// precheck validates what debug/elf would otherwise trust blindly: it
// refuses a compressed section-name string table, which debug/elf would
// decompress without any size limit.
func (f *File) precheck() error {
	var ident [64]byte
	n, err := f.r.ReadAt(ident[:], 0)
	if n < 16 {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return f.formatf("ELF header", 0, err, "reading it")
	}
	if string(ident[:4]) != elf.ELFMAG {
		return f.formatf("ELF header", 0, nil, "not an ELF file (bad magic number)")
	}
	var bo binary.ByteOrder
	switch elf.Data(ident[elf.EI_DATA]) {
	case elf.ELFDATA2LSB:
		bo = binary.LittleEndian
	case elf.ELFDATA2MSB:
		bo = binary.BigEndian
	default:
		return f.formatf("ELF header", uint64(elf.EI_DATA), nil, "unknown ELF data encoding %d", ident[elf.EI_DATA])
	}
	var shoff, phoff uint64
	var shentsize, shnum, shstrndx, phentsize, phnum uint64
	var flagsOff, flagsLen, linkOff uint64
	switch elf.Class(ident[elf.EI_CLASS]) {
	case elf.ELFCLASS32:
		if n < 52 {
			return f.formatf("ELF header", uint64(n), io.ErrUnexpectedEOF, "the file ends inside it (%d of 52 bytes)", n)
		}
		phoff = uint64(bo.Uint32(ident[28:]))
		phentsize = uint64(bo.Uint16(ident[42:]))
		phnum = uint64(bo.Uint16(ident[44:]))
		shoff = uint64(bo.Uint32(ident[32:]))
		shentsize = uint64(bo.Uint16(ident[46:]))
		shnum = uint64(bo.Uint16(ident[48:]))
		shstrndx = uint64(bo.Uint16(ident[50:]))
		flagsOff, flagsLen, linkOff = 8, 4, 24
	case elf.ELFCLASS64:
		if n < 64 {
			return f.formatf("ELF header", uint64(n), io.ErrUnexpectedEOF, "the file ends inside it (%d of 64 bytes)", n)
		}
		phoff = bo.Uint64(ident[32:])
		phentsize = uint64(bo.Uint16(ident[54:]))
		phnum = uint64(bo.Uint16(ident[56:]))
		shoff = bo.Uint64(ident[40:])
		shentsize = uint64(bo.Uint16(ident[58:]))
		shnum = uint64(bo.Uint16(ident[60:]))
		shstrndx = uint64(bo.Uint16(ident[62:]))
		flagsOff, flagsLen, linkOff = 8, 8, 40
	default:
		return f.formatf("ELF header", uint64(elf.EI_CLASS), nil, "unknown ELF class %d", ident[elf.EI_CLASS])
	}
	// The header tables must lie inside the file (debug/elf would fail
	// with a bare EOF).
	if f.size >= 0 && phoff != 0 && phnum != 0xffff {
		if end := phoff + phnum*phentsize; end < phoff || end > uint64(f.size) {
			return f.formatf("", phoff, io.ErrUnexpectedEOF, "program headers: %d entries of %d bytes run past the end of the file (%d bytes)",
				phnum, phentsize, f.size)
		}
	}
	if f.size >= 0 && shoff != 0 && shnum != 0 {
		if end := shoff + shnum*shentsize; end < shoff || end > uint64(f.size) {
			return f.formatf("", shoff, io.ErrUnexpectedEOF, "section headers: %d entries of %d bytes run past the end of the file (%d bytes)",
				shnum, shentsize, f.size)
		}
	}
	if shoff == 0 || shentsize < linkOff+4 {
		return nil // debug/elf rejects or ignores these itself
	}
	readHdr := func(i uint64) ([]byte, error) {
		if i > 1<<32 {
			return nil, fmt.Errorf("section index %d out of range", i)
		}
		b := make([]byte, linkOff+4)
		if err := readat.Full(f.r, b, shoff+i*shentsize); err != nil {
			return nil, fmt.Errorf("section header %d at offset %#x: %w", i, shoff+i*shentsize, err)
		}
		return b, nil
	}
	if shstrndx == uint64(elf.SHN_XINDEX) || shnum == 0 {
		h0, err := readHdr(0)
		if err != nil {
			return f.formatf("section headers", 0, err, "file offset %#x: reading entry 0", shoff)
		}
		if shstrndx == uint64(elf.SHN_XINDEX) {
			shstrndx = uint64(bo.Uint32(h0[linkOff:]))
		}
	}
	if shstrndx == 0 {
		return nil
	}
	h, err := readHdr(shstrndx)
	if err != nil {
		return nil // debug/elf reports the bad index itself
	}
	var flags uint64
	if flagsLen == 4 {
		flags = uint64(bo.Uint32(h[flagsOff:]))
	} else {
		flags = bo.Uint64(h[flagsOff:])
	}
	if elf.SectionFlag(flags)&elf.SHF_COMPRESSED != 0 {
		return f.formatf("section headers", shstrndx*shentsize, nil, "entry %d (file offset %#x): compressed section name table is not supported",
			shstrndx, shoff+shstrndx*shentsize)
	}
	return nil
}

// loadSections fills the exported section fields.
func (f *File) loadSections() error {
	find := func(names ...string) *secInfo {
		for _, name := range names {
			for i := range f.secs {
				s := &f.secs[i]
				if s.name == name && s.typ != elf.SHT_NOBITS && s.typ != elf.SHT_NULL {
					return s
				}
			}
		}
		return nil
	}
	var err error
	load := func(dst **Section, eager bool, names ...string) {
		if err != nil {
			return
		}
		s := find(names...)
		if s == nil {
			return
		}
		sec := &Section{Name: s.name, Addr: s.addr, Offset: s.offset, Size: s.size}
		si := *s
		sec.load = &lazyLoad{fn: func() ([]byte, error) { return f.sectionData(&si) }}
		if eager {
			if _, err = sec.Load(); err != nil {
				return
			}
		}
		*dst = sec
	}
	for i := range f.secs {
		switch f.secs[i].name {
		case ".gopclntab", ".go.buildinfo", ".note.go.buildid":
			f.Go = true
		}
	}
	load(&f.EhFrame, true, ".eh_frame")
	load(&f.EhFrameHdr, true, ".eh_frame_hdr")
	load(&f.DebugFrame, true, ".debug_frame", ".zdebug_frame")
	load(&f.SFrame, true, ".sframe")
	load(&f.GotPlt, true, ".got.plt")
	load(&f.Text, false, ".text")
	if err != nil {
		return err
	}
	if f.EhFrameHdr == nil && len(f.secs) == 0 {
		for _, p := range f.ef.Progs {
			if p.Type != elf.PT_GNU_EH_FRAME {
				continue
			}
			data, err := f.readAt(p.Off, p.Filesz)
			if err != nil {
				return f.formatf("PT_GNU_EH_FRAME", 0, err, "reading its contents")
			}
			f.EhFrameHdr = &Section{Name: ".eh_frame_hdr", Addr: p.Vaddr, Offset: p.Off, Size: p.Filesz, Data: data}
			break
		}
	}
	return nil
}

// sectionData reads (and if needed decompresses) a section's contents.
func (f *File) sectionData(s *secInfo) ([]byte, error) {
	if !s.comp {
		data, err := f.readAt(s.offset, s.elfSec.FileSize)
		if err != nil {
			return nil, f.formatf(s.name, 0, err, "reading its contents")
		}
		return data, nil
	}
	data, err := f.decompress(s)
	if err != nil {
		return nil, f.formatf(s.name, 0, err, "decompressing")
	}
	return data, nil
}

// decompress returns the decompressed contents of a compressed section,
// refusing sizes beyond maxDecompressed or maxRatio times the compressed
// size, and reading the stream incrementally so memory follows real data.
func (f *File) decompress(s *secInfo) ([]byte, error) {
	es := s.elfSec
	csize := es.FileSize
	if f.size >= 0 && (es.Offset > uint64(f.size) || csize > uint64(f.size)-es.Offset) {
		return nil, fmt.Errorf("offset %#x: %d bytes: %w (file size %d)", es.Offset, csize, errShort, f.size)
	}
	kind := "zlib"
	if es.Flags&elf.SHF_COMPRESSED != 0 {
		var b [4]byte
		if err := readat.Full(f.r, b[:], es.Offset); err != nil {
			return nil, fmt.Errorf("offset %#x: compression header: %w", es.Offset, err)
		}
		switch ct := elf.CompressionType(f.ByteOrder.Uint32(b[:])); ct {
		case elf.COMPRESS_ZLIB:
		case elf.COMPRESS_ZSTD:
			kind = "zstd"
		default:
			return nil, fmt.Errorf("offset %#x: unknown compression type %d", es.Offset, uint32(ct))
		}
	}
	want := s.size
	if want > maxDecompressed || want/maxRatio > csize {
		return nil, fmt.Errorf("offset %#x: decompressed size %d is implausible for %d compressed bytes", es.Offset, want, csize)
	}
	var out bytes.Buffer
	err := protect(func() error {
		rd := es.Open()
		out.Grow(int(min(want, 1<<20)))
		n, err := io.Copy(&out, io.LimitReader(rd, int64(want)))
		if err != nil {
			return err
		}
		if uint64(n) != want {
			return io.ErrUnexpectedEOF
		}
		return nil
	})
	if err != nil {
		if msg := err.Error(); len(msg) > len(kind) && msg[:len(kind)+1] == kind+":" {
			return nil, err
		}
		return nil, fmt.Errorf("%s: %w", kind, err)
	}
	return out.Bytes(), nil
}

// zdebugSize returns the decompressed size of a legacy .zdebug section from
// its "ZLIB" header, or ok=false if it has none (then it is not compressed).
func (f *File) zdebugSize(s *elf.Section) (uint64, bool) {
	var b [12]byte
	if s.FileSize < 12 || readat.Full(f.r, b[:], s.Offset) != nil || string(b[:4]) != "ZLIB" {
		return 0, false
	}
	return binary.BigEndian.Uint64(b[4:]), true
}
