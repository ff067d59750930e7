package zstd

import (
	"encoding/binary"
	"fmt"
)

// Literals_Block_Type values.
const (
	litRaw = iota
	litRLE
	litCompressed
	litTreeless
)

// decodeLiterals decodes the Literals_Section at the start of a compressed
// block's content. It returns the literals (which may alias in) and the
// section's size.
func (d *Decoder) decodeLiterals(in []byte) ([]byte, int, error) {
	if len(in) == 0 {
		return nil, 0, corrupt("missing literals section")
	}
	typ := in[0] & 3
	sf := in[0] >> 2 & 3
	if typ == litRaw || typ == litRLE {
		var size, hs int
		switch sf {
		case 0, 2:
			size, hs = int(in[0]>>3), 1
		case 1:
			if len(in) < 2 {
				return nil, 0, corrupt("truncated literals header")
			}
			size, hs = int(in[0]>>4)|int(in[1])<<4, 2
		case 3:
			if len(in) < 3 {
				return nil, 0, corrupt("truncated literals header")
			}
			size, hs = int(in[0]>>4)|int(in[1])<<4|int(in[2])<<12, 3
		}
		if size > d.blockMax {
			return nil, 0, fmt.Errorf("literals size %d exceeds block maximum %d", size, d.blockMax)
		}
		if typ == litRaw {
			if hs+size > len(in) {
				return nil, 0, corrupt("truncated raw literals")
			}
			return in[hs : hs+size], hs + size, nil
		}
		if hs+1 > len(in) {
			return nil, 0, corrupt("truncated RLE literals")
		}
		lits := d.litScratch(size)
		b := in[hs]
		for i := range lits {
			lits[i] = b
		}
		return lits, hs + 1, nil
	}

	var regen, csize, hs int
	switch sf {
	case 0, 1:
		if len(in) < 3 {
			return nil, 0, corrupt("truncated literals header")
		}
		h := uint32(in[0]) | uint32(in[1])<<8 | uint32(in[2])<<16
		regen, csize, hs = int(h>>4&0x3FF), int(h>>14&0x3FF), 3
	case 2:
		if len(in) < 4 {
			return nil, 0, corrupt("truncated literals header")
		}
		h := binary.LittleEndian.Uint32(in)
		regen, csize, hs = int(h>>4&0x3FFF), int(h>>18&0x3FFF), 4
	case 3:
		if len(in) < 5 {
			return nil, 0, corrupt("truncated literals header")
		}
		h := uint64(binary.LittleEndian.Uint32(in)) | uint64(in[4])<<32
		regen, csize, hs = int(h>>4&0x3FFFF), int(h>>22&0x3FFFF), 5
	}
	if regen > d.blockMax {
		return nil, 0, fmt.Errorf("literals size %d exceeds block maximum %d", regen, d.blockMax)
	}
	if hs+csize > len(in) {
		return nil, 0, corrupt("truncated compressed literals")
	}
	src := in[hs : hs+csize]
	if typ == litCompressed {
		d.hufOK = false
		n, err := d.huf.readTree(src)
		if err != nil {
			return nil, 0, err
		}
		d.hufOK = true
		src = src[n:]
	} else if !d.hufOK {
		return nil, 0, corrupt("treeless literals without a previous Huffman table")
	}
	lits := d.litScratch(regen)
	var err error
	if sf == 0 {
		err = d.huf.decode1(lits, src)
	} else {
		err = d.huf.decode4(lits, src)
	}
	if err != nil {
		return nil, 0, err
	}
	return lits, hs + csize, nil
}

// litScratch returns the literals buffer resized to n (at most a block).
func (d *Decoder) litScratch(n int) []byte {
	if cap(d.litBuf) < n {
		d.litBuf = make([]byte, maxBlockSize)
	}
	return d.litBuf[:n]
}
