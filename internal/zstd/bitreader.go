package zstd

import (
	"encoding/binary"
	"math/bits"
)

// backReader reads the backward bitstreams of Huffman and FSE data: the
// stream starts at its last byte, whose highest set bit marks the start,
// and bits are taken from most to least significant while moving toward the
// first byte. Unread bits sit left-aligned in value, so a peek past the end
// of the stream sees zeros; n counts the valid bits and goes negative when
// more bits were read than the stream holds.
type backReader struct {
	in    []byte
	off   int // in[:off] is not loaded yet
	value uint64
	n     int
}

// init starts reading stream in, skipping the padding and the start marker.
func (br *backReader) init(in []byte) error {
	if len(in) == 0 {
		return corrupt("empty bitstream")
	}
	last := in[len(in)-1]
	if last == 0 {
		return corrupt("bitstream without end marker")
	}
	*br = backReader{in: in, off: len(in)}
	br.refill()
	skip := bits.LeadingZeros8(last) + 1
	br.value <<= uint(skip)
	br.n -= skip
	return nil
}

// refill loads bytes until at least 57 bits are valid or the stream has no
// more bytes. The common case (eight bytes left to load) is small enough to
// be inlined.
func (br *backReader) refill() {
	if br.off >= 8 && uint(br.n) <= 56 {
		b := uint(64-br.n) >> 3
		w := binary.LittleEndian.Uint64(br.in[br.off-8:])
		br.value |= w >> (64 - 8*b) << (uint(64-br.n) - 8*b)
		br.off -= int(b)
		br.n += int(8 * b)
		return
	}
	br.refillTail()
}

// refillTail is refill near the start of the stream, one byte at a time.
func (br *backReader) refillTail() {
	if br.n < 0 {
		return
	}
	for br.n <= 56 && br.off > 0 {
		br.off--
		br.value |= uint64(br.in[br.off]) << uint(56-br.n)
		br.n += 8
	}
}

// read consumes nb bits (at most 56, and at most those refill guaranteed).
func (br *backReader) read(nb uint8) uint64 {
	v := br.value >> (64 - nb)
	br.value <<= nb
	br.n -= int(nb)
	return v
}

// done reports whether the stream was consumed exactly.
func (br *backReader) done() bool { return br.off == 0 && br.n == 0 }
