package zstd

import (
	"encoding/binary"
	"fmt"
)

// frameHeader is a parsed Frame_Header (RFC 8878 section 3.1.1.1).
type frameHeader struct {
	window   uint64 // Window_Size; the content size for single-segment frames
	fcs      uint64 // Frame_Content_Size, if hasFCS
	hasFCS   bool
	checksum bool // a 4-byte Content_Checksum follows the last block
}

// Sizes of the Dictionary_ID and Frame_Content_Size fields by flag value.
var (
	dictIDSizes = [4]int{0, 1, 2, 4}
	fcsSizes    = [4]int{0, 2, 4, 8}
)

// frameHeaderSize returns the size of the frame header that starts with the
// Frame_Header_Descriptor fhd (the magic number excluded).
func frameHeaderSize(fhd byte) int {
	single := fhd&0x20 != 0
	size := 1 + dictIDSizes[fhd&3] + fcsSizes[fhd>>6]
	if !single {
		size++ // Window_Descriptor
	}
	if single && fhd>>6 == 0 {
		size++ // a 1-byte Frame_Content_Size
	}
	return size
}

// parseFrameHeader parses b, a whole frame header as sized by
// frameHeaderSize. On error it also returns the offset in b of the bad field.
func parseFrameHeader(b []byte) (frameHeader, int, error) {
	var fh frameHeader
	fhd := b[0]
	if fhd&0x08 != 0 {
		return fh, 0, corrupt("reserved frame header bit set")
	}
	single := fhd&0x20 != 0
	fh.checksum = fhd&0x04 != 0
	p := 1
	if !single {
		wd := b[p]
		exp := uint(wd >> 3)
		base := uint64(1) << (10 + exp)
		fh.window = base + base/8*uint64(wd&7)
		p++
	}
	if n := dictIDSizes[fhd&3]; n > 0 {
		var id uint32
		for i := 0; i < n; i++ {
			id |= uint32(b[p+i]) << (8 * i)
		}
		if id != 0 {
			return fh, p, fmt.Errorf("%w (frame needs dictionary %d)", ErrDictionary, id)
		}
		p += n
	}
	switch fhd >> 6 {
	case 0:
		if single {
			fh.fcs, fh.hasFCS = uint64(b[p]), true
		}
	case 1:
		fh.fcs, fh.hasFCS = uint64(binary.LittleEndian.Uint16(b[p:]))+256, true
	case 2:
		fh.fcs, fh.hasFCS = uint64(binary.LittleEndian.Uint32(b[p:])), true
	case 3:
		fh.fcs, fh.hasFCS = binary.LittleEndian.Uint64(b[p:]), true
	}
	if single {
		fh.window = fh.fcs
	}
	return fh, 0, nil
}
