package cfi

import (
	"encoding/binary"
	"fmt"
)

// EhFrameHdr is a parsed .eh_frame_hdr: a pointer to .eh_frame and a table
// of (initial location, FDE address) pairs sorted by location, which finds
// the FDE for a PC by binary search.
type EhFrameHdr struct {
	// Version is the header version (1).
	Version uint8
	// EhFramePtr is the address of the .eh_frame section.
	EhFramePtr uint64
	// FDECount is the number of entries in the search table (0 if the
	// header has none).
	FDECount int
	// EhFramePtrEnc, FDECountEnc and TableEnc are the DW_EH_PE encodings
	// of the header's fields.
	EhFramePtrEnc, FDECountEnc, TableEnc uint8

	sec      Section // the header's bytes, as a section for readEnc
	table    int     // offset of the table in sec.Data
	entSize  int     // size of one table field
	fastPath bool    // TableEnc is datarel|sdata4
}

// ParseEhFrameHdr parses the .eh_frame_hdr section data, loaded at virtual
// address addr. name is used in error messages (e.g. "libc.so.6
// .eh_frame_hdr"). DW_EH_PE_datarel values are relative to addr, as the
// LSB specifies; DW_EH_PE_absptr values are read as 8 bytes. The search
// table must use a fixed-size encoding.
func ParseEhFrameHdr(data []byte, addr uint64, order binary.ByteOrder, name string) (*EhFrameHdr, error) {
	if order == nil {
		return nil, &FormatError{Pkg: "cfi", Section: name, Msg: "nil byte order"}
	}
	h := &EhFrameHdr{sec: Section{Name: name, Data: data, Addr: addr, ByteOrder: order, PtrSize: 8, DataAddr: addr}}
	if len(data) < 4 {
		return nil, &FormatError{Pkg: "cfi", Section: name, Msg: fmt.Sprintf("header of %d bytes too short", len(data))}
	}
	h.Version, h.EhFramePtrEnc, h.FDECountEnc, h.TableEnc = data[0], data[1], data[2], data[3]
	if h.Version != 1 {
		return nil, &FormatError{Pkg: "cfi", Section: name, Msg: fmt.Sprintf("unsupported version %d", h.Version)}
	}
	i := 4
	if h.EhFramePtrEnc == PEOmit {
		return nil, &FormatError{Pkg: "cfi", Section: name, Offset: 1, Msg: "no eh_frame_ptr"}
	}
	var msg string
	h.EhFramePtr, i, _, msg = readEnc(&h.sec, data, i, h.EhFramePtrEnc, 0)
	if msg != "" {
		return nil, &FormatError{Pkg: "cfi", Section: name, Offset: 4, Msg: "eh_frame_ptr: " + msg}
	}
	if h.FDECountEnc == PEOmit || h.TableEnc == PEOmit {
		return h, nil
	}
	at := i
	var count uint64
	count, i, _, msg = readEnc(&h.sec, data, i, h.FDECountEnc, 0)
	if msg != "" {
		return nil, &FormatError{Pkg: "cfi", Section: name, Offset: uint64(at), Msg: "fde_count: " + msg}
	}
	switch h.TableEnc & 0x0f {
	case PEUdata2, PESdata2:
		h.entSize = 2
	case PEUdata4, PESdata4:
		h.entSize = 4
	case PEUdata8, PESdata8, PEAbsptr, PESigned:
		h.entSize = 8
	default:
		return nil, &FormatError{Pkg: "cfi", Section: name, Offset: 3, Msg: fmt.Sprintf("table encoding %#x is not searchable", h.TableEnc)}
	}
	switch h.TableEnc & 0x70 {
	case 0, PEPCRel, PETextRel, PEDataRel:
	default:
		return nil, &FormatError{Pkg: "cfi", Section: name, Offset: 3, Msg: fmt.Sprintf("unsupported table encoding %#x", h.TableEnc)}
	}
	if h.TableEnc&PEIndirect != 0 {
		return nil, &FormatError{Pkg: "cfi", Section: name, Offset: 3, Msg: fmt.Sprintf("unsupported table encoding %#x", h.TableEnc)}
	}
	if count > uint64(len(data)-i)/uint64(2*h.entSize) {
		return nil, &FormatError{Pkg: "cfi", Section: name, Offset: uint64(at), Msg: fmt.Sprintf("table of %d entries runs past end of section", count)}
	}
	h.FDECount = int(count)
	h.table = i
	h.fastPath = h.TableEnc == PEDataRel|PESdata4
	return h, nil
}

// Entry returns table entry i: the initial location of an FDE and the
// FDE's address. It panics if i is not in [0, FDECount).
func (h *EhFrameHdr) Entry(i int) (pc, fdeAddr uint64) {
	if i < 0 || i >= h.FDECount {
		panic(fmt.Sprintf("cfi: EhFrameHdr.Entry(%d) with %d entries", i, h.FDECount))
	}
	return h.field(2 * i), h.field(2*i + 1)
}

// field decodes table field k (entry k/2, location if k is even).
func (h *EhFrameHdr) field(k int) uint64 {
	off := h.table + k*h.entSize
	if h.fastPath {
		return h.sec.Addr + uint64(int64(int32(h.sec.ByteOrder.Uint32(h.sec.Data[off:]))))
	}
	// ParseEhFrameHdr checked that the table fits and that the encoding
	// is fixed-size, so readEnc cannot fail here.
	v, _, _, _ := readEnc(&h.sec, h.sec.Data, off, h.TableEnc, 0)
	return v
}

// Lookup binary-searches the table for pc and returns the address of the
// FDE with the greatest initial location <= pc: the only FDE that may cover
// pc. The caller must check that pc is below the FDE's End. ok is false if
// pc is below every entry or there is no table.
func (h *EhFrameHdr) Lookup(pc uint64) (fdeAddr uint64, ok bool) {
	lo, hi := 0, h.FDECount // find the first entry with location > pc
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if h.field(2*mid) <= pc {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 {
		return 0, false
	}
	return h.field(2*(lo-1) + 1), true
}
