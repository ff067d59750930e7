package sframe

import (
	"fmt"
	"math"
)

// Layout of an encoded section: the header (no auxiliary header), the FDE
// sub-section (sorted by function start) and the FRE sub-section, with the
// FREs of each function in FDE order. In version 3 each function's FREs
// are preceded by its 5-byte attribute record.
//
// Each FDE gets the narrowest FRE start-offset type that holds its last
// FRE's start offset, and each FRE the narrowest data-word size that holds
// all its words. Function starts are encoded relative to the section in
// versions 1 and 2 (what binutils 2.40 to 2.44 write, and what their
// readelf expects) and relative to the start-address field in version 3
// (SFRAME_F_FDE_FUNC_START_PCREL, always set there).

// fdeSize returns the size of one FDE sub-section entry of the version.
func (g *Generated) fdeSize() int {
	switch g.Version {
	case Version1:
		return fdeSizeV1
	case Version2:
		return fdeSizeV2
	}
	return fdeSizeV3
}

// freType returns the FRE type (start-offset width) of an FDE.
func (f *genFDE) freType() uint8 {
	var last uint32
	if n := len(f.fres); n > 0 {
		last = f.fres[n-1].off
	}
	switch {
	case last <= math.MaxUint8:
		return FREAddr1
	case last <= math.MaxUint16:
		return FREAddr2
	}
	return FREAddr4
}

// wordSize returns the FRE's data-word size code (0: 1 byte, 1: 2, 2: 4).
func (e *genFRE) wordSize() uint8 {
	code := uint8(0)
	for i, w := range e.words[:e.n] {
		if e.ctrl&(1<<i) != 0 {
			// An unsigned control word.
			switch u := uint32(w); {
			case u > math.MaxUint16:
				return 2
			case u > math.MaxUint8:
				code = 1
			}
			continue
		}
		switch {
		case w < math.MinInt16 || w > math.MaxInt16:
			return 2
		case w < math.MinInt8 || w > math.MaxInt8:
			code = 1
		}
	}
	return code
}

func (e *genFRE) size(freType uint8) int {
	return 1<<freType + 1 + int(e.n)<<e.wordSize()
}

// Size returns the size in bytes of the encoded section.
func (g *Generated) Size() int {
	n := HeaderSize + len(g.fdes)*g.fdeSize()
	for i := range g.fdes {
		f := &g.fdes[i]
		if g.Version == Version3 {
			n += attrSizeV3
		}
		t := f.freType()
		for j := range f.fres {
			n += f.fres[j].size(t)
		}
	}
	return n
}

// Encode lays the section out for the section address sectionAddr (its
// sh_addr in the object; 0 for a section that is not loaded) and returns
// its bytes. It fails only when a function lies too far from the section
// for a version 1 or 2 start offset (32 bits).
func (g *Generated) Encode(sectionAddr uint64) ([]byte, error) {
	bo := g.Order
	fdeSize := g.fdeSize()
	freBase := HeaderSize + len(g.fdes)*fdeSize
	out := make([]byte, g.Size())
	bo.PutUint16(out, Magic)
	out[2] = g.Version
	flags := uint8(FlagFDESorted)
	if g.Version == Version3 {
		flags |= FlagFuncStartPCRel
	}
	out[3] = flags
	out[4] = byte(g.ABI)
	if g.ABI == ABIAMD64LE {
		out[6] = 0xf8 // the RA is always at CFA-8
	}
	bo.PutUint32(out[8:], uint32(len(g.fdes)))
	bo.PutUint32(out[12:], uint32(g.numFREs()))
	bo.PutUint32(out[16:], uint32(len(out)-freBase))
	bo.PutUint32(out[20:], 0)
	bo.PutUint32(out[24:], uint32(freBase-HeaderSize))
	p := freBase
	for i := range g.fdes {
		f := &g.fdes[i]
		at := HeaderSize + i*fdeSize
		b := out[at : at+fdeSize]
		t := f.freType()
		info := f.info | t
		freOff := uint32(p - freBase)
		switch g.Version {
		case Version1, Version2:
			rel := int64(f.start - sectionAddr)
			if rel < math.MinInt32 || rel > math.MaxInt32 {
				return nil, fmt.Errorf("sframe: function at %#x is too far from the section at %#x for a version %d start offset",
					f.start, sectionAddr, g.Version)
			}
			bo.PutUint32(b, uint32(int32(rel)))
			bo.PutUint32(b[4:], f.size)
			bo.PutUint32(b[8:], freOff)
			bo.PutUint32(b[12:], uint32(len(f.fres)))
			b[16] = info
			if g.Version == Version2 {
				b[17] = f.repSize
			}
		default:
			bo.PutUint64(b, f.start-(sectionAddr+uint64(at)))
			bo.PutUint32(b[8:], f.size)
			bo.PutUint32(b[12:], freOff)
			a := out[p : p+attrSizeV3]
			bo.PutUint16(a, uint16(len(f.fres)))
			a[2] = info
			if f.flex {
				a[3] = fdeTypeFlex
			}
			a[4] = f.repSize
			p += attrSizeV3
		}
		for j := range f.fres {
			e := &f.fres[j]
			switch t {
			case FREAddr1:
				out[p] = byte(e.off)
			case FREAddr2:
				bo.PutUint16(out[p:], uint16(e.off))
			default:
				bo.PutUint32(out[p:], e.off)
			}
			p += 1 << t
			ws := e.wordSize()
			fi := e.n<<1 | ws<<5
			if e.baseSP {
				fi |= 1
			}
			if e.mangled {
				fi |= 0x80
			}
			out[p] = fi
			p++
			for _, w := range e.words[:e.n] {
				switch ws {
				case 0:
					out[p] = byte(int8(w))
				case 1:
					bo.PutUint16(out[p:], uint16(int16(w)))
				default:
					bo.PutUint32(out[p:], uint32(w))
				}
				p += 1 << ws
			}
		}
	}
	return out, nil
}

func (g *Generated) numFREs() int {
	n := 0
	for i := range g.fdes {
		n += len(g.fdes[i].fres)
	}
	return n
}
