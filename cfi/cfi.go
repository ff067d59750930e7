// Package cfi decodes DWARF Call Frame Information, the tables compilers
// emit so that a debugger or unwinder can find, for any instruction address,
// where the caller's frame begins (the CFA) and where each callee-saved
// register and the return address were stored.
//
// Two sections carry CFI: .eh_frame (loaded at run time, used by C++
// exceptions and glibc's backtrace, with GCC's pointer encodings and
// augmentations) and .debug_frame (DWARF debug information, never loaded).
// Parse decodes either into FDEs (one per function or code range), each tied
// to its CIE. FDE.Rows executes the CIE's and FDE's call frame instructions
// and reports the resulting unwind table row by row; FDE.RowAt returns the
// row for one address. ParseEhFrameHdr reads the sorted lookup table in
// .eh_frame_hdr so that a single FDE can be found and decoded with FDEAt
// without parsing the whole section. EvalExpr evaluates the DWARF
// expressions that some rules use, and MatchPLT and MatchBreg recognise the
// common expression shapes so callers can turn them into plain arithmetic
// ahead of time.
//
// Decoding never trusts the input: malformed bytes give a *FormatError that
// names the section and the byte offset, never a panic, a hang or an
// allocation larger than the input.
package cfi

import (
	"encoding/binary"
	"fmt"

	"github.com/rewindstack/rewind/internal/fileerr"
)

// Kind says which flavour of CFI section a Section holds.
type Kind uint8

// CFI section kinds.
const (
	// EhFrame is a .eh_frame section: CIE id 0, FDE CIE pointers relative
	// to the pointer field, GCC pointer encodings and augmentations.
	EhFrame Kind = iota
	// DebugFrame is a .debug_frame section: CIE id all ones, FDE CIE
	// pointers are section offsets, addresses are plain target addresses.
	DebugFrame
)

// String returns the section name the kind corresponds to.
func (k Kind) String() string {
	switch k {
	case EhFrame:
		return ".eh_frame"
	case DebugFrame:
		return ".debug_frame"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Section describes the bytes of one CFI section and the addresses needed to
// decode pointers.
type Section struct {
	// Name is used in error messages, e.g.
	// "/usr/lib/x86_64-linux-gnu/libc.so.6 .eh_frame".
	Name string
	// Kind says whether Data is .eh_frame or .debug_frame.
	Kind Kind
	// Data holds the section contents. Decoded CIEs and FDEs keep
	// sub-slices of it.
	Data []byte
	// Addr is the virtual address of Data[0]; DW_EH_PE_pcrel pointers are
	// relative to Addr plus the offset of the pointer field.
	Addr uint64
	// ByteOrder is the target byte order.
	ByteOrder binary.ByteOrder
	// PtrSize is the target pointer size, 8 or 4: the size of
	// DW_EH_PE_absptr and the default .debug_frame address size.
	PtrSize int
	// TextAddr is the base for DW_EH_PE_textrel pointers (0 if unknown).
	TextAddr uint64
	// DataAddr is the base for DW_EH_PE_datarel pointers (0 if unknown).
	DataAddr uint64
}

// check validates the fields every decoder relies on.
func (s *Section) check() error {
	if s == nil {
		return &FormatError{Pkg: "cfi", Msg: "nil Section"}
	}
	if s.PtrSize != 4 && s.PtrSize != 8 {
		return &FormatError{Pkg: "cfi", Section: s.Name, Msg: fmt.Sprintf("Section.PtrSize is %d, want 4 or 8", s.PtrSize)}
	}
	if s.ByteOrder == nil {
		return &FormatError{Pkg: "cfi", Section: s.Name, Msg: "Section.ByteOrder is nil"}
	}
	if s.Kind != EhFrame && s.Kind != DebugFrame {
		return &FormatError{Pkg: "cfi", Section: s.Name, Msg: fmt.Sprintf("unknown section kind %d", uint8(s.Kind))}
	}
	return nil
}

// FormatError reports malformed CFI: the section it was found in (the
// Section's Name), the byte offset within the section, and what is wrong.
// It is the FormatError of every rewind parser (sframe, perfdata, elfobj,
// corefile report theirs with the same type), formatted as
// "cfi: SECTION+0xOFFSET: MSG".
type FormatError = fileerr.FormatError

// DW_EH_PE pointer encodings, as used in .eh_frame augmentation data and
// .eh_frame_hdr. The low four bits select the value format, bits 4-6 the
// base the value is relative to, and bit 7 an extra indirection.
const (
	PEAbsptr  = 0x00 // unsigned, Section.PtrSize bytes
	PEULEB128 = 0x01 // unsigned LEB128
	PEUdata2  = 0x02 // unsigned, 2 bytes
	PEUdata4  = 0x03 // unsigned, 4 bytes
	PEUdata8  = 0x04 // unsigned, 8 bytes
	PESigned  = 0x08 // signed, Section.PtrSize bytes
	PESLEB128 = 0x09 // signed LEB128
	PESdata2  = 0x0a // signed, 2 bytes
	PESdata4  = 0x0b // signed, 4 bytes
	PESdata8  = 0x0c // signed, 8 bytes

	PEPCRel   = 0x10 // relative to the address of the encoded value
	PETextRel = 0x20 // relative to Section.TextAddr
	PEDataRel = 0x30 // relative to Section.DataAddr
	PEFuncRel = 0x40 // relative to the start of the function
	PEAligned = 0x50 // value aligned to the pointer size

	PEIndirect = 0x80 // the decoded address holds the real pointer
	PEOmit     = 0xff // no value present
)

// ReadEncodedPointer decodes one pointer with DW_EH_PE encoding enc at byte
// offset off of sec.Data. funcBase is the base for DW_EH_PE_funcrel (the
// start address of the function the pointer belongs to; 0 if none).
//
// It returns the decoded value, the offset just past it, and whether
// DW_EH_PE_indirect was set: then val is the address of the pointer, which
// the caller may dereference in the target's memory. For DW_EH_PE_omit
// (0xff) it returns val 0 and next == off. Truncated data, unknown formats
// or applications give a *FormatError.
func ReadEncodedPointer(sec *Section, off uint64, enc uint8, funcBase uint64) (val, next uint64, indirect bool, err error) {
	if err := sec.check(); err != nil {
		return 0, off, false, err
	}
	if off > uint64(len(sec.Data)) {
		return 0, off, false, &FormatError{Pkg: "cfi", Section: sec.Name, Offset: off, Msg: "encoded pointer offset past end of section"}
	}
	v, n, ind, msg := readEnc(sec, sec.Data, int(off), enc, funcBase)
	if msg != "" {
		return 0, off, false, &FormatError{Pkg: "cfi", Section: sec.Name, Offset: off, Msg: msg}
	}
	return v, uint64(n), ind, nil
}

// readEnc decodes an encoded pointer at b[i:]. b must be a prefix of
// sec.Data (so offsets in b are section offsets and reads cannot run past
// the end of the entry being decoded). It returns the value, the index past
// it, the indirect flag, and an error message ("" on success).
func readEnc(sec *Section, b []byte, i int, enc uint8, funcBase uint64) (uint64, int, bool, string) {
	if enc == PEOmit {
		return 0, i, false, ""
	}
	start := i
	ps := sec.PtrSize
	app := enc & 0x70
	if app == PEAligned {
		addr := sec.Addr + uint64(i)
		pad := (uint64(ps) - addr%uint64(ps)) % uint64(ps)
		if pad > uint64(len(b)-i) {
			return 0, i, false, "truncated aligned pointer"
		}
		i += int(pad)
	}
	var v uint64
	var ok bool
	switch enc & 0x0f {
	case PEAbsptr:
		v, i, ok = readUint(b, i, ps, sec.ByteOrder)
	case PESigned:
		v, i, ok = readUint(b, i, ps, sec.ByteOrder)
		if ok && ps == 4 {
			v = uint64(int64(int32(uint32(v))))
		}
	case PEULEB128:
		v, i = uleb(b, i)
		ok = i >= 0
	case PESLEB128:
		var s int64
		s, i = sleb(b, i)
		v, ok = uint64(s), i >= 0
	case PEUdata2:
		v, i, ok = readUint(b, i, 2, sec.ByteOrder)
	case PEUdata4:
		v, i, ok = readUint(b, i, 4, sec.ByteOrder)
	case PEUdata8:
		v, i, ok = readUint(b, i, 8, sec.ByteOrder)
	case PESdata2:
		v, i, ok = readUint(b, i, 2, sec.ByteOrder)
		v = uint64(int64(int16(uint16(v))))
	case PESdata4:
		v, i, ok = readUint(b, i, 4, sec.ByteOrder)
		v = uint64(int64(int32(uint32(v))))
	case PESdata8:
		v, i, ok = readUint(b, i, 8, sec.ByteOrder)
	default:
		return 0, start, false, fmt.Sprintf("unknown pointer encoding %#x", enc)
	}
	if !ok {
		return 0, start, false, fmt.Sprintf("truncated pointer (encoding %#x)", enc)
	}
	switch app {
	case 0, PEAligned:
	case PEPCRel:
		v += sec.Addr + uint64(start)
	case PETextRel:
		v += sec.TextAddr
	case PEDataRel:
		v += sec.DataAddr
	case PEFuncRel:
		v += funcBase
	default:
		return 0, start, false, fmt.Sprintf("unknown pointer encoding %#x", enc)
	}
	if ps == 4 {
		v &= 0xffffffff
	}
	return v, i, enc&PEIndirect != 0, ""
}

// readUint reads an n-byte unsigned value (n = 1, 2, 4 or 8) at b[i:].
func readUint(b []byte, i, n int, order binary.ByteOrder) (uint64, int, bool) {
	if i < 0 || n > len(b)-i {
		return 0, i, false
	}
	switch n {
	case 1:
		return uint64(b[i]), i + 1, true
	case 2:
		return uint64(order.Uint16(b[i:])), i + 2, true
	case 4:
		return uint64(order.Uint32(b[i:])), i + 4, true
	case 8:
		return order.Uint64(b[i:]), i + 8, true
	}
	return 0, i, false
}

// uleb decodes an unsigned LEB128 number at b[i:]. It returns the value and
// the index past it, or -1 if the number is truncated. Bits beyond 64 are
// dropped.
func uleb(b []byte, i int) (uint64, int) {
	var v uint64
	var shift uint
	for i < len(b) {
		c := b[i]
		i++
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		shift += 7
		if c < 0x80 {
			return v, i
		}
	}
	return 0, -1
}

// sleb decodes a signed LEB128 number at b[i:], like uleb.
func sleb(b []byte, i int) (int64, int) {
	var v uint64
	var shift uint
	for i < len(b) {
		c := b[i]
		i++
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		shift += 7
		if c < 0x80 {
			if c&0x40 != 0 && shift < 64 {
				v |= ^uint64(0) << shift
			}
			return int64(v), i
		}
	}
	return 0, -1
}
