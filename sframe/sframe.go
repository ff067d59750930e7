// Package sframe reads SFrame stack trace information (the .sframe section
// that GNU as emits with --gsframe and ld keeps in a PT_GNU_SFRAME segment),
// dumps it exactly as readelf --sframe does, and unwinds with it.
//
// SFrame describes, for every PC range of every function, three things only:
// how to compute the CFA (stack or frame pointer plus an offset), where the
// return address is saved and where the caller's frame pointer is saved.
// That is all a stack trace needs, and it is simple enough to evaluate
// without an interpreter.
//
// All versions of the format are read: version 1 (binutils 2.40), version 2
// (2.41 to 2.45, with the SFRAME_F_FDE_FUNC_START_PCREL errata of 2.45) and
// version 3 (2.46 and later: a 16-byte function index, per-function
// attribute records in the FRE sub-section, flexible FDEs and a signal-frame
// bit), in either byte order, for the AMD64, AArch64 and s390x ABIs. The
// binutils specification ("The SFrame Format") is the authority; where
// libsframe differs from it, this package says so next to the code.
//
// A Section is immutable once parsed and safe for concurrent use.
package sframe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"

	"github.com/rewindstack/rewind/internal/fileerr"
)

// Magic is the SFrame magic number, in the section's byte order.
const Magic = 0xdee2

// Format versions.
const (
	Version1 = 1
	Version2 = 2
	Version3 = 3
)

// Header flags.
const (
	// FlagFDESorted: the function descriptors are sorted by start address.
	FlagFDESorted = 0x1
	// FlagFramePointer: all functions keep a frame pointer (versions 1
	// and 2 only; no producer sets it).
	FlagFramePointer = 0x2
	// FlagFuncStartPCRel: a function's start address is encoded relative to
	// the address of the start-address field itself rather than to the
	// start of the section (binutils 2.45 and later, always in version 3).
	FlagFuncStartPCRel = 0x4
)

// ABI identifies the target of a section.
type ABI uint8

// ABIs.
const (
	ABIAArch64BE ABI = 1
	ABIAArch64LE ABI = 2
	ABIAMD64LE   ABI = 3
	ABIS390XBE   ABI = 4
)

func (a ABI) String() string {
	switch a {
	case ABIAArch64BE:
		return "aarch64-be"
	case ABIAArch64LE:
		return "aarch64"
	case ABIAMD64LE:
		return "amd64"
	case ABIS390XBE:
		return "s390x"
	}
	return fmt.Sprintf("abi(%d)", uint8(a))
}

// IsAArch64 reports whether the ABI is one of the two AArch64 ones.
func (a ABI) IsAArch64() bool { return a == ABIAArch64BE || a == ABIAArch64LE }

// Sizes of the fixed records.
const (
	HeaderSize  = 28
	fdeSizeV1   = 17
	fdeSizeV2   = 20
	fdeSizeV3   = 16
	attrSizeV3  = 5
	maxWords    = 15
	s390xCFAAdj = 160 // CFA offsets on s390x are stored as (offset-160)/8
)

// Header is the section header (the preamble included).
type Header struct {
	Version uint8
	Flags   uint8
	ABI     ABI
	// CFAFixedFPOffset and CFAFixedRAOffset are the header's fixed offsets
	// from the CFA of the saved frame pointer and return address; 0 means
	// not fixed (the FREs say). AMD64 has a fixed RA offset of -8.
	CFAFixedFPOffset int8
	CFAFixedRAOffset int8
	AuxHeaderLen     uint8
	NumFDEs          uint32
	NumFREs          uint32
	FRELen           uint32
	FDEOff           uint32
	FREOff           uint32
}

// FDE is one function descriptor. In version 3 the fields NumFREs, Info,
// Info2 and RepSize come from the function's attribute record at the start
// of its FREs.
type FDE struct {
	// Start is the function's first address in the address space of the
	// section (the section's own sh_addr plus the decoded offset).
	Start uint64
	// Size is the function's size in bytes.
	Size uint32
	// RawStart is the start-address field as stored (sign-extended).
	RawStart int64
	// FREOff is the offset of the function's first FRE (in version 3, of
	// its attribute record) from the start of the FRE sub-section.
	FREOff uint32
	// NumFREs is the number of FREs of the function.
	NumFREs uint32
	// Info is the FDE info byte: FRE type (bits 0-3), PC type (bit 4),
	// AArch64 PAuth key (bit 5), signal frame (bit 7, version 3).
	Info uint8
	// Info2 is the version 3 second info byte: FDE type (bits 0-4).
	Info2 uint8
	// RepSize is the size of the repeated block of a PCMASK FDE (PLT
	// entries). Version 1 has no such field; it reads as 0 and lookups use
	// 16, the PLT entry size of the time.
	RepSize uint8

	fieldOff uint32 // section offset of the start-address field
	fres     uint32 // section offset of the first FRE
}

// FRE types: the width of an FRE's start offset.
const (
	FREAddr1 = 0
	FREAddr2 = 1
	FREAddr4 = 2
)

// FREType returns the FRE type (FREAddr1, FREAddr2 or FREAddr4).
func (f *FDE) FREType() uint8 { return f.Info & 0xf }

// PCMask reports an FDE of PC type PCMASK: FRE start offsets apply to the
// PC's offset modulo RepSize (a table of identical PLT entries).
func (f *FDE) PCMask() bool { return f.Info&0x10 != 0 }

// PAuthKeyB reports that AArch64 return addresses are signed with key B.
func (f *FDE) PAuthKeyB() bool { return f.Info&0x20 != 0 }

// Signal reports a version 3 signal frame FDE (a signal trampoline).
func (f *FDE) Signal() bool { return f.Info&0x80 != 0 }

// Flex reports a version 3 flexible FDE, whose FRE data words come in
// (control, offset) pairs.
func (f *FDE) Flex() bool { return f.Info2&0x1f == fdeTypeFlex }

const fdeTypeFlex = 1

// End returns the first address after the function.
func (f *FDE) End() uint64 { return f.Start + uint64(f.Size) }

// Contains reports whether addr lies in the function.
func (f *FDE) Contains(addr uint64) bool { return addr >= f.Start && addr-f.Start < uint64(f.Size) }

// FRE is one frame row entry: the rule for the PCs from its start offset to
// the next FRE's (or the end of the function).
type FRE struct {
	// StartOffset is the first PC of the row as an offset from the
	// function's start (for PCMASK FDEs, within a repeated block).
	StartOffset uint32
	// Info is the FRE info byte: CFA base (bit 0: 1 SP, 0 FP), number of
	// data words (bits 1-4), word size (bits 5-6: 1, 2 or 4 bytes),
	// AArch64 mangled RA (bit 7).
	Info uint8
	// Off is the FRE's offset in the section.
	Off uint32

	raw [maxWords]uint32
}

// BaseSP reports that the CFA is computed from the stack pointer (else from
// the frame pointer), for a default FDE.
func (e *FRE) BaseSP() bool { return e.Info&1 != 0 }

// NumWords returns the number of data words (offsets).
func (e *FRE) NumWords() int { return int(e.Info>>1) & 0xf }

// WordSize returns the size in bytes of each data word.
func (e *FRE) WordSize() int { return 1 << (e.Info >> 5 & 3) }

// RAMangled reports an AArch64 return address signed by pointer
// authentication.
func (e *FRE) RAMangled() bool { return e.Info&0x80 != 0 }

// RAUndefined reports an FRE without data words: the return address is
// undefined, the thread's outermost frame.
func (e *FRE) RAUndefined() bool { return e.NumWords() == 0 }

// Word returns data word i sign-extended (0 if absent).
func (e *FRE) Word(i int) int32 {
	if i < 0 || i >= e.NumWords() {
		return 0
	}
	switch e.WordSize() {
	case 1:
		return int32(int8(e.raw[i]))
	case 2:
		return int32(int16(e.raw[i]))
	}
	return int32(e.raw[i])
}

// UWord returns data word i zero-extended (0 if absent): flexible FDEs
// store unsigned control words.
func (e *FRE) UWord(i int) uint32 {
	if i < 0 || i >= e.NumWords() {
		return 0
	}
	return e.raw[i]
}

// Section is a parsed .sframe section.
type Section struct {
	// Name names the section in errors, such as "/usr/bin/ls .sframe".
	Name string
	// Addr is the section's address (sh_addr) in its object.
	Addr uint64
	// Data is the section's contents.
	Data   []byte
	Header Header
	// Order is the section's byte order, found from the magic number.
	Order binary.ByteOrder

	hdrSize int
	fdeBase int // section offset of the FDE sub-section
	freBase int // section offset of the FRE sub-section
	fdes    []FDE
	sorted  bool // fdes are ordered by Start: binary search works
}

// FormatError is the error Parse returns for malformed data: Section is
// the section's name as given to Parse, Offset the byte offset in the
// section. It is the FormatError of every rewind parser (cfi, perfdata,
// elfobj, corefile report theirs with the same type), formatted as
// "sframe: SECTION+0xOFFSET: MSG".
type FormatError = fileerr.FormatError

// ErrNotSFrame is wrapped by the FormatError for data without the magic.
var ErrNotSFrame = errors.New("not SFrame data")

// notSFrame is the error for data without the SFrame magic.
func notSFrame(name string, data []byte) error {
	return &FormatError{Pkg: "sframe", Section: name, Msg: fmt.Sprintf("bad magic %#04x", binary.LittleEndian.Uint16(data)), Err: ErrNotSFrame}
}

// Parse decodes an SFrame section. sectionAddr is the section's address
// (sh_addr) in its object, used to turn the encoded start offsets into
// function addresses; name is used in error messages ("FILE .sframe").
//
// Everything is validated here, so that later lookups and iteration cannot
// fail: the sub-sections and every FDE's FREs must lie inside the section,
// the FRE counts must add up to the header's, FRE types, word sizes and
// word counts must be valid, and FRE start offsets must lie inside their
// function, as libsframe asserts. Nothing is allocated before the counts it
// depends on have been checked against the section's length.
func Parse(data []byte, sectionAddr uint64, name string) (*Section, error) {
	if name == "" {
		name = ".sframe"
	}
	bad := func(off int, format string, args ...any) error {
		return &FormatError{Pkg: "sframe", Section: name, Offset: uint64(off), Msg: fmt.Sprintf(format, args...)}
	}
	if len(data) < HeaderSize {
		if len(data) >= 2 && binary.LittleEndian.Uint16(data) != Magic && binary.BigEndian.Uint16(data) != Magic {
			return nil, notSFrame(name, data)
		}
		return nil, bad(0, "section of %d bytes is shorter than the %d-byte header", len(data), HeaderSize)
	}
	s := &Section{Name: name, Addr: sectionAddr, Data: data}
	switch {
	case binary.LittleEndian.Uint16(data) == Magic:
		s.Order = binary.LittleEndian
	case binary.BigEndian.Uint16(data) == Magic:
		s.Order = binary.BigEndian
	default:
		return nil, notSFrame(name, data)
	}
	bo := s.Order
	h := &s.Header
	h.Version = data[2]
	h.Flags = data[3]
	h.ABI = ABI(data[4])
	h.CFAFixedFPOffset = int8(data[5])
	h.CFAFixedRAOffset = int8(data[6])
	h.AuxHeaderLen = data[7]
	h.NumFDEs = bo.Uint32(data[8:])
	h.NumFREs = bo.Uint32(data[12:])
	h.FRELen = bo.Uint32(data[16:])
	h.FDEOff = bo.Uint32(data[20:])
	h.FREOff = bo.Uint32(data[24:])
	if h.Version < Version1 || h.Version > Version3 {
		return nil, bad(2, "unsupported version %d", h.Version)
	}
	if h.ABI < ABIAArch64BE || h.ABI > ABIS390XBE {
		return nil, bad(4, "unknown ABI/arch %d", h.ABI)
	}
	s.hdrSize = HeaderSize + int(h.AuxHeaderLen)
	if s.hdrSize > len(data) {
		return nil, bad(7, "auxiliary header of %d bytes runs past the end (section is %d bytes)", h.AuxHeaderLen, len(data))
	}
	size := uint64(len(data))
	fdeSize := s.FDESize()
	fdeEnd := uint64(s.hdrSize) + uint64(h.FDEOff) + uint64(h.NumFDEs)*uint64(fdeSize)
	if fdeEnd > size {
		return nil, bad(8, "FDE count %d (%d bytes each, from offset %#x) runs past the end (section is %d bytes)",
			h.NumFDEs, fdeSize, uint64(s.hdrSize)+uint64(h.FDEOff), len(data))
	}
	freEnd := uint64(s.hdrSize) + uint64(h.FREOff) + uint64(h.FRELen)
	if freEnd > size {
		return nil, bad(16, "FRE sub-section of %d bytes at offset %#x runs past the end (section is %d bytes)",
			h.FRELen, uint64(s.hdrSize)+uint64(h.FREOff), len(data))
	}
	// Every FRE takes at least two bytes (start offset and info byte), and
	// a version 3 function at least five more for its attribute record.
	if uint64(h.NumFREs)*2 > uint64(h.FRELen) {
		return nil, bad(12, "FRE count %d cannot fit in the %d-byte FRE sub-section", h.NumFREs, h.FRELen)
	}
	s.fdeBase = s.hdrSize + int(h.FDEOff)
	s.freBase = s.hdrSize + int(h.FREOff)
	freLimit := s.freBase + int(h.FRELen)

	s.fdes = make([]FDE, h.NumFDEs)
	var total uint64
	s.sorted = h.Flags&FlagFDESorted != 0
	for i := range s.fdes {
		f := &s.fdes[i]
		off := s.fdeBase + i*fdeSize
		b := data[off : off+fdeSize]
		f.fieldOff = uint32(off)
		switch h.Version {
		case Version1, Version2:
			f.RawStart = int64(int32(bo.Uint32(b)))
			f.Size = bo.Uint32(b[4:])
			f.FREOff = bo.Uint32(b[8:])
			f.NumFREs = bo.Uint32(b[12:])
			f.Info = b[16]
			if h.Version == Version2 {
				f.RepSize = b[17]
			}
			f.fres = uint32(s.freBase) + f.FREOff
			if uint64(s.freBase)+uint64(f.FREOff) > uint64(freLimit) {
				return nil, bad(off+8, "FDE %d: FRE offset %#x is past the %d-byte FRE sub-section", i, f.FREOff, h.FRELen)
			}
		case Version3:
			f.RawStart = int64(bo.Uint64(b))
			f.Size = bo.Uint32(b[8:])
			f.FREOff = bo.Uint32(b[12:])
			at := uint64(s.freBase) + uint64(f.FREOff)
			if at+attrSizeV3 > uint64(freLimit) {
				return nil, bad(off+12, "FDE %d: attribute record at FRE offset %#x runs past the %d-byte FRE sub-section", i, f.FREOff, h.FRELen)
			}
			a := data[at : at+attrSizeV3]
			f.NumFREs = uint32(bo.Uint16(a))
			f.Info = a[2]
			f.Info2 = a[3]
			f.RepSize = a[4]
			f.fres = uint32(at) + attrSizeV3
			if t := f.Info2 & 0x1f; t > fdeTypeFlex {
				return nil, bad(int(at)+3, "FDE %d: unknown FDE type %d", i, t)
			}
		}
		if f.FREType() > FREAddr4 {
			return nil, bad(int(f.fieldOff), "FDE %d: unknown FRE type %d", i, f.FREType())
		}
		f.Start = s.startAddr(f)
		if i > 0 && f.Start < s.fdes[i-1].Start {
			s.sorted = false // a wrong flag only costs speed
		}
		total += uint64(f.NumFREs)
		if total > uint64(h.NumFREs) {
			return nil, bad(int(f.fieldOff), "FDE %d: FRE count %d runs past the header's total of %d FREs", i, f.NumFREs, h.NumFREs)
		}
		// Walk the FREs: each must fit in the sub-section, and start inside
		// its function.
		p := int(f.fres)
		for j := uint32(0); j < f.NumFREs; j++ {
			var e FRE
			n, err := s.decodeFRE(f, p, freLimit, &e)
			if err != "" {
				return nil, bad(p, "FDE %d: FRE %d of %d: %s", i, j, f.NumFREs, err)
			}
			p += n
		}
	}
	if total != uint64(h.NumFREs) {
		return nil, bad(12, "the FDEs have %d FREs, the header says %d", total, h.NumFREs)
	}
	return s, nil
}

// FDESize returns the size of one entry of the FDE sub-section: 17 bytes
// in version 1, 20 in version 2 and 16 (the function index) in version 3.
func (s *Section) FDESize() int {
	switch s.Header.Version {
	case Version1:
		return fdeSizeV1
	case Version2:
		return fdeSizeV2
	}
	return fdeSizeV3
}

// startAddr decodes an FDE's function start address.
func (s *Section) startAddr(f *FDE) uint64 {
	a := s.Addr + uint64(f.RawStart)
	if s.Header.Flags&FlagFuncStartPCRel != 0 && s.Header.Version >= Version2 {
		a += uint64(f.fieldOff)
	}
	return a
}

// decodeFRE decodes the FRE at section offset p, which must end by limit,
// and returns its size, or a reason it is malformed.
func (s *Section) decodeFRE(f *FDE, p, limit int, e *FRE) (int, string) {
	asz := 1 << f.FREType()
	if p+asz+1 > limit {
		return 0, "runs past the end of the FRE sub-section"
	}
	b := s.Data[p:limit]
	switch asz {
	case 1:
		e.StartOffset = uint32(b[0])
	case 2:
		e.StartOffset = uint32(s.Order.Uint16(b))
	default:
		e.StartOffset = s.Order.Uint32(b)
	}
	e.Info = b[asz]
	e.Off = uint32(p)
	if e.Info>>5&3 == 3 {
		return 0, "invalid data word size (info byte " + fmt.Sprintf("%#x", e.Info) + ")"
	}
	n, w := e.NumWords(), e.WordSize()
	max := 3
	if f.Flex() {
		max = 6 // (control, offset) for CFA, RA and FP
	}
	if n > max {
		return 0, fmt.Sprintf("%d data words (at most %d)", n, max)
	}
	size := asz + 1 + n*w
	if p+size > limit {
		return 0, "data words run past the end of the FRE sub-section"
	}
	d := b[asz+1:]
	for i := 0; i < n; i++ {
		switch w {
		case 1:
			e.raw[i] = uint32(d[i])
		case 2:
			e.raw[i] = uint32(s.Order.Uint16(d[2*i:]))
		default:
			e.raw[i] = s.Order.Uint32(d[4*i:])
		}
	}
	if f.Size > 0 && e.StartOffset >= f.Size || f.Size == 0 && e.StartOffset != 0 {
		return 0, fmt.Sprintf("start offset %#x is outside the %d-byte function", e.StartOffset, f.Size)
	}
	return size, ""
}

// NumFDEs returns the number of function descriptors.
func (s *Section) NumFDEs() int { return len(s.fdes) }

// FDE returns function descriptor i (in section order).
func (s *Section) FDE(i int) *FDE { return &s.fdes[i] }

// FDEs returns the function descriptors in section order. The slice is
// shared: do not modify it.
func (s *Section) FDEs() []FDE { return s.fdes }

// Sorted reports whether lookups use binary search: the section says its
// FDEs are sorted, and they are.
func (s *Section) Sorted() bool { return s.sorted }

// FREs iterates over the FREs of function descriptor i.
func (s *Section) FREs(i int) iter.Seq[FRE] {
	return func(yield func(FRE) bool) {
		f := &s.fdes[i]
		p := int(f.fres)
		limit := s.freBase + int(s.Header.FRELen)
		for j := uint32(0); j < f.NumFREs; j++ {
			var e FRE
			n, _ := s.decodeFRE(f, p, limit, &e) // validated by Parse
			if !yield(e) {
				return
			}
			p += n
		}
	}
}
