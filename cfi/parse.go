package cfi

import (
	"fmt"
	"strings"
)

// CIE is a Common Information Entry: the parameters and initial
// instructions shared by a group of FDEs.
type CIE struct {
	// Offset is the section offset of the CIE's length field.
	Offset uint64
	// Version is the CIE version: 1, 3 or 4.
	Version uint8
	// Augmentation is the augmentation string, e.g. "zR" or "zPLR".
	Augmentation string
	// AddressSize is the size of target addresses: from the CIE for
	// version 4, otherwise Section.PtrSize.
	AddressSize uint8
	// SegmentSize is the size of a segment selector (version 4 only).
	SegmentSize uint8
	// CodeAlign is the code alignment factor that advance_loc deltas are
	// multiplied by.
	CodeAlign uint64
	// DataAlign is the data alignment factor that factored offsets are
	// multiplied by.
	DataAlign int64
	// RAReg is the return address column.
	RAReg uint64
	// FDEEncoding is the DW_EH_PE encoding of FDE addresses ('R');
	// DW_EH_PE_absptr if absent.
	FDEEncoding uint8
	// LSDAEncoding is the DW_EH_PE encoding of the FDE's LSDA pointer
	// ('L'); DW_EH_PE_omit (0xff) if the CIE has no 'L'.
	LSDAEncoding uint8
	// Personality is the personality routine pointer ('P'), decoded but,
	// if its encoding is indirect, not dereferenced: it is then the
	// address of the pointer.
	Personality uint64
	// PersonalityEncoding is the DW_EH_PE encoding of Personality
	// (DW_EH_PE_omit if the CIE has no 'P'); test PEIndirect on it.
	PersonalityEncoding uint8
	// SignalFrame reports 'S': FDEs using this CIE describe a signal
	// trampoline, whose PC is not a return address (do not subtract one
	// before looking up the caller's row).
	SignalFrame bool
	// Initial holds the initial instructions (a sub-slice of Section.Data).
	Initial []byte

	sec     *Section // section the CIE was decoded from; nil if built by hand
	initOff uint64   // section offset of Initial
	hasZ    bool     // augmentation has 'z': FDEs carry augmentation data
	init    *Row     // rules after Initial, precomputed by Parse (nil: run Initial)
	initErr error    // error running Initial, found by Parse
}

// FDE is a Frame Description Entry: the unwind rules for one range of code.
type FDE struct {
	// Offset is the section offset of the FDE's length field.
	Offset uint64
	// CIE is the FDE's CIE, shared with the other FDEs that use it.
	CIE *CIE
	// Start and End delimit the covered PCs, [Start, End).
	Start, End uint64
	// LSDA is the language-specific data area pointer ('L'), 0 if none.
	LSDA uint64
	// Instructions holds the FDE's call frame instructions (a sub-slice
	// of Section.Data).
	Instructions []byte

	insOff uint64 // section offset of Instructions
}

// entry is the header of one CIE or FDE.
type entry struct {
	off    int // offset of the length field
	idOff  int // offset of the CIE id / CIE pointer field
	body   int // offset just past the id field
	end    int // offset just past the entry
	id     uint64
	is64   bool // 64-bit DWARF format
	isCIE  bool // entry is a CIE
	isZero bool // zero terminator (end == off + size of the length)
}

// readEntry decodes the header of the entry at off.
func readEntry(sec *Section, off int) (entry, error) {
	d := sec.Data
	e := entry{off: off}
	l32, p, ok := readUint(d, off, 4, sec.ByteOrder)
	if !ok {
		return e, fmtErr(sec, off, "truncated entry length (%d bytes left)", len(d)-off)
	}
	length := l32
	if l32 == 0xffffffff {
		e.is64 = true
		length, p, ok = readUint(d, p, 8, sec.ByteOrder)
		if !ok {
			return e, fmtErr(sec, off, "truncated 64-bit entry length")
		}
	} else if l32 >= 0xfffffff0 {
		return e, fmtErr(sec, off, "reserved initial length %#x", l32)
	}
	if length == 0 {
		e.isZero = true
		e.end = p
		return e, nil
	}
	e.idOff = p
	idSize := 4
	if e.is64 && sec.Kind == DebugFrame {
		idSize = 8
	}
	// Name the entry in the length error if its id can be read.
	what := "entry"
	if id, _, ok := readUint(d, p, idSize, sec.ByteOrder); ok && length >= uint64(idSize) {
		e.id = id
		e.isCIE = isCIEID(sec, id, idSize)
		what = "FDE"
		if e.isCIE {
			what = "CIE"
		}
	}
	if length > uint64(len(d)-p) {
		return e, fmtErr(sec, off, "%s length %#x runs past end of section", what, length)
	}
	if length < uint64(idSize) {
		return e, fmtErr(sec, off, "entry length %#x too short for its id", length)
	}
	e.end = p + int(length)
	e.body = p + idSize
	return e, nil
}

func isCIEID(sec *Section, id uint64, idSize int) bool {
	if sec.Kind == EhFrame {
		return id == 0
	}
	if idSize == 4 {
		return id == 0xffffffff
	}
	return id == ^uint64(0)
}

func fmtErr(sec *Section, off int, format string, args ...any) *FormatError {
	return &FormatError{Pkg: "cfi", Section: sec.Name, Offset: uint64(off), Msg: fmt.Sprintf(format, args...)}
}

// parser decodes entries of one section, caching CIEs by offset.
type parser struct {
	sec     *Section
	cies    map[int]*CIE
	lastOff int
	last    *CIE
	// precompute runs each CIE's initial instructions once (Parse);
	// FDEAt, which decodes a single FDE, does not bother.
	precompute bool
	// cieSlot, if not nil, is where the next CIE is decoded.
	cieSlot *CIE
}

// Parse decodes every CIE and FDE of the section in order and returns the
// FDEs. It handles 32- and 64-bit DWARF lengths, CIE versions 1, 3 and 4 and
// the augmentations "z", "R", "P", "L", "S", "eh" (old GCC), "B" and "G"
// (ignored). A zero length ends a .eh_frame section (what follows is not
// read) and is skipped in .debug_frame. In .eh_frame the CIE pointer (like
// the CIE id) is always 4 bytes, as the LSB specifies, even in an entry with
// a 64-bit length.
//
// FDEs covering no addresses (Start >= End, including zero padding and the
// tombstones linkers leave for discarded functions) are dropped. CIEs are
// decoded once and shared by all FDEs that use them.
//
// On malformed input Parse returns the FDEs decoded before the bad entry
// together with a *FormatError.
func Parse(sec *Section) ([]*FDE, error) {
	if err := sec.check(); err != nil {
		return nil, err
	}
	n := countEntries(sec)
	slab := make([]FDE, n)
	used := 0
	out := make([]*FDE, 0, n)
	p := parser{sec: sec, lastOff: -1, precompute: true}
	d := sec.Data
	for off := 0; off < len(d); {
		if len(d)-off < 4 && allZero(d[off:]) {
			break // alignment padding too short for a length
		}
		e, err := readEntry(sec, off)
		if err != nil {
			return out, err
		}
		if e.isZero {
			if sec.Kind == EhFrame {
				break
			}
			off = e.end
			continue
		}
		if e.isCIE {
			if _, err := p.cie(e); err != nil {
				return out, err
			}
		} else {
			var f *FDE
			if used < len(slab) {
				f = &slab[used]
			} else {
				f = new(FDE)
			}
			if err := p.fde(e, f); err != nil {
				return out, err
			}
			if f.Start < f.End {
				out = append(out, f)
				used++
			} else {
				*f = FDE{} // covers nothing: drop it and reuse the slot
			}
		}
		off = e.end
	}
	return out, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// countEntries walks the entry lengths to size Parse's allocations. It stops
// quietly at anything malformed; Parse reports it.
func countEntries(sec *Section) int {
	d := sec.Data
	n := 0
	for off := 0; off+4 <= len(d); {
		l := uint64(sec.ByteOrder.Uint32(d[off:]))
		off += 4
		if l == 0xffffffff {
			if off+8 > len(d) {
				break
			}
			l = sec.ByteOrder.Uint64(d[off:])
			off += 8
		}
		if l == 0 {
			if sec.Kind == EhFrame {
				break
			}
			continue
		}
		if l > uint64(len(d)-off) {
			break
		}
		off += int(l)
		n++
	}
	return n
}

// FDEAt decodes the single FDE whose length field is at section offset off,
// and its CIE. It is meant for use with EhFrameHdr.Lookup: the FDE is
// returned even if it covers no addresses, and the caller checks that it
// covers the PC it looks for.
func FDEAt(sec *Section, off uint64) (*FDE, error) {
	if err := sec.check(); err != nil {
		return nil, err
	}
	if off >= uint64(len(sec.Data)) {
		return nil, &FormatError{Pkg: "cfi", Section: sec.Name, Offset: off, Msg: "FDE offset past end of section"}
	}
	e, err := readEntry(sec, int(off))
	if err != nil {
		return nil, err
	}
	if e.isZero {
		return nil, fmtErr(sec, e.off, "zero terminator where an FDE was expected")
	}
	if e.isCIE {
		return nil, fmtErr(sec, e.off, "CIE where an FDE was expected")
	}
	// One allocation for the FDE and its CIE.
	both := new(struct {
		f FDE
		c CIE
	})
	p := parser{sec: sec, lastOff: -1, cieSlot: &both.c}
	if err := p.fde(e, &both.f); err != nil {
		return nil, err
	}
	return &both.f, nil
}

// cieAt returns the CIE at section offset off, decoding it on first use.
// from is the offset of the pointer that led there, for error messages.
func (p *parser) cieAt(off int, from int) (*CIE, error) {
	if off == p.lastOff {
		return p.last, nil
	}
	if c, ok := p.cies[off]; ok {
		p.lastOff, p.last = off, c
		return c, nil
	}
	if off < 0 || off >= len(p.sec.Data) {
		return nil, fmtErr(p.sec, from, "CIE pointer %#x outside section", off)
	}
	e, err := readEntry(p.sec, off)
	if err != nil {
		return nil, err
	}
	if e.isZero || !e.isCIE {
		return nil, fmtErr(p.sec, from, "CIE pointer %#x does not point to a CIE", off)
	}
	return p.cie(e)
}

// cie decodes the CIE with header e and caches it.
func (p *parser) cie(e entry) (*CIE, error) {
	if e.off == p.lastOff {
		return p.last, nil
	}
	if c, ok := p.cies[e.off]; ok {
		return c, nil
	}
	sec := p.sec
	d := sec.Data[:e.end]
	c := p.cieSlot
	if c == nil {
		c = new(CIE)
	}
	p.cieSlot = nil
	*c = CIE{Offset: uint64(e.off), sec: sec, FDEEncoding: PEAbsptr, LSDAEncoding: PEOmit, PersonalityEncoding: PEOmit}
	i := e.body
	if i >= len(d) {
		return nil, fmtErr(sec, e.off, "truncated CIE")
	}
	c.Version = d[i]
	i++
	if c.Version != 1 && c.Version != 3 && c.Version != 4 {
		return nil, fmtErr(sec, i-1, "unsupported CIE version %d", c.Version)
	}
	augOff := i
	nul := -1
	for j := i; j < len(d); j++ {
		if d[j] == 0 {
			nul = j
			break
		}
	}
	if nul < 0 {
		return nil, fmtErr(sec, augOff, "unterminated CIE augmentation string")
	}
	c.Augmentation = internAug(d[i:nul])
	i = nul + 1
	aug := c.Augmentation
	if strings.HasPrefix(aug, "eh") {
		// GCC 2.x: a pointer-sized eh_ptr follows the string.
		if sec.PtrSize > len(d)-i {
			return nil, fmtErr(sec, i, "truncated CIE eh_ptr")
		}
		i += sec.PtrSize
		aug = aug[2:]
	}
	c.AddressSize = uint8(sec.PtrSize)
	if c.Version >= 4 {
		if i+2 > len(d) {
			return nil, fmtErr(sec, i, "truncated CIE address_size")
		}
		c.AddressSize, c.SegmentSize = d[i], d[i+1]
		switch c.AddressSize {
		case 1, 2, 4, 8:
		default:
			return nil, fmtErr(sec, i, "unsupported CIE address size %d", c.AddressSize)
		}
		i += 2
	}
	start := i
	if c.CodeAlign, i = uleb(d, i); i < 0 {
		return nil, fmtErr(sec, start, "truncated CIE code alignment factor")
	}
	start = i
	if c.DataAlign, i = sleb(d, i); i < 0 {
		return nil, fmtErr(sec, start, "truncated CIE data alignment factor")
	}
	start = i
	if c.Version == 1 {
		if i >= len(d) {
			return nil, fmtErr(sec, start, "truncated CIE return address register")
		}
		c.RAReg = uint64(d[i])
		i++
	} else if c.RAReg, i = uleb(d, i); i < 0 {
		return nil, fmtErr(sec, start, "truncated CIE return address register")
	}
	augEnd := -1
	if strings.HasPrefix(aug, "z") {
		c.hasZ = true
		start = i
		var n uint64
		if n, i = uleb(d, i); i < 0 || n > uint64(len(d)-i) {
			return nil, fmtErr(sec, start, "CIE augmentation data runs past end of entry")
		}
		augEnd = i + int(n)
		d = d[:augEnd]
		aug = aug[1:]
	}
	unknown := byte(0)
	for k := 0; k < len(aug); k++ {
		ch := aug[k]
		if unknown != 0 && (ch == 'L' || ch == 'P' || ch == 'R') {
			return nil, fmtErr(sec, augOff, "unknown augmentation %q in %q precedes %q", unknown, c.Augmentation, ch)
		}
		switch ch {
		case 'L', 'P', 'R':
			if i >= len(d) {
				return nil, fmtErr(sec, i, "truncated CIE augmentation data for %q", ch)
			}
			enc := d[i]
			i++
			switch ch {
			case 'L':
				c.LSDAEncoding = enc
			case 'R':
				c.FDEEncoding = enc
			case 'P':
				c.PersonalityEncoding = enc
				var msg string
				start = i
				c.Personality, i, _, msg = readEnc(sec, d, i, enc, 0)
				if msg != "" {
					return nil, fmtErr(sec, start, "personality: %s", msg)
				}
			}
		case 'S':
			c.SignalFrame = true
		case 'B', 'G':
			// AArch64 BTI and MTE markers: no data.
		default:
			if !c.hasZ {
				return nil, fmtErr(sec, augOff, "unknown augmentation %q in %q", ch, c.Augmentation)
			}
			if unknown == 0 {
				unknown = ch
			}
		}
	}
	if augEnd >= 0 {
		i = augEnd
		d = sec.Data[:e.end]
	}
	c.Initial = d[i:e.end:e.end]
	c.initOff = uint64(i)
	if p.precompute {
		if p.cies == nil {
			p.cies = make(map[int]*CIE, 4)
		}
		p.cies[e.off] = c
		c.initialRow()
	}
	p.lastOff, p.last = e.off, c
	return c, nil
}

// internAug returns the augmentation string, without allocating for the
// common ones.
func internAug(b []byte) string {
	switch string(b) {
	case "":
		return ""
	case "zR":
		return "zR"
	case "zPLR":
		return "zPLR"
	case "zRS":
		return "zRS"
	case "zPR":
		return "zPR"
	case "zLR":
		return "zLR"
	}
	return string(b)
}

// fde decodes the FDE with header e into f.
func (p *parser) fde(e entry, f *FDE) error {
	sec := p.sec
	var cieOff int
	if sec.Kind == EhFrame {
		if e.id > uint64(e.idOff) {
			return fmtErr(sec, e.idOff, "CIE pointer %#x points before start of section", e.id)
		}
		cieOff = e.idOff - int(e.id)
	} else {
		if e.id >= uint64(len(sec.Data)) {
			return fmtErr(sec, e.idOff, "CIE pointer %#x outside section", e.id)
		}
		cieOff = int(e.id)
	}
	c, err := p.cieAt(cieOff, e.idOff)
	if err != nil {
		return err
	}
	d := sec.Data[:e.end]
	i := e.body
	f.Offset = uint64(e.off)
	f.CIE = c
	if sec.Kind == DebugFrame {
		if int(c.SegmentSize) > len(d)-i {
			return fmtErr(sec, i, "truncated FDE segment selector")
		}
		i += int(c.SegmentSize)
		var ok1, ok2 bool
		start := i
		f.Start, i, ok1 = readUint(d, i, int(c.AddressSize), sec.ByteOrder)
		var n uint64
		n, i, ok2 = readUint(d, i, int(c.AddressSize), sec.ByteOrder)
		if !ok1 || !ok2 {
			return fmtErr(sec, start, "truncated FDE address range")
		}
		f.End = f.Start + n
		if f.End < f.Start {
			f.End = f.Start // wrapped: a tombstone, covers nothing
		}
	} else {
		start := i
		var msg string
		var ind bool
		f.Start, i, ind, msg = readEnc(sec, d, i, c.FDEEncoding, 0)
		if msg != "" {
			return fmtErr(sec, start, "FDE start: %s", msg)
		}
		if ind {
			return fmtErr(sec, start, "indirect FDE address encoding %#x", c.FDEEncoding)
		}
		start = i
		var n uint64
		n, i, _, msg = readEnc(sec, d, i, c.FDEEncoding&0x0f, 0)
		if msg != "" {
			return fmtErr(sec, start, "FDE range: %s", msg)
		}
		if sec.PtrSize == 4 {
			n &= 0xffffffff
		}
		f.End = f.Start + n
		if f.End < f.Start {
			f.End = f.Start
		}
	}
	if c.hasZ {
		start := i
		var n uint64
		if n, i = uleb(d, i); i < 0 || n > uint64(len(d)-i) {
			return fmtErr(sec, start, "FDE augmentation data runs past end of entry")
		}
		augEnd := i + int(n)
		if c.LSDAEncoding != PEOmit {
			var msg string
			f.LSDA, _, _, msg = readEnc(sec, d[:augEnd], i, c.LSDAEncoding, f.Start)
			if msg != "" {
				return fmtErr(sec, i, "LSDA: %s", msg)
			}
		}
		i = augEnd
	} else if c.LSDAEncoding != PEOmit {
		var msg string
		start := i
		f.LSDA, i, _, msg = readEnc(sec, d, i, c.LSDAEncoding, f.Start)
		if msg != "" {
			return fmtErr(sec, start, "LSDA: %s", msg)
		}
	}
	f.Instructions = d[i:e.end:e.end]
	f.insOff = uint64(i)
	return nil
}
