package zstd

import (
	"encoding/binary"
	"math/bits"
)

// XXH64 (seed 0), which Zstandard uses for Content_Checksum. Written from
// the algorithm's description: four accumulators over 32-byte stripes, then
// a merge, the tail, and a final avalanche.

const (
	xxPrime1 uint64 = 0x9E3779B185EBCA87
	xxPrime2 uint64 = 0xC2B2AE3D27D4EB4F
	xxPrime3 uint64 = 0x165667B19E3779F9
	xxPrime4 uint64 = 0x85EBCA77C2B2AE63
	xxPrime5 uint64 = 0x27D4EB2F165667C5
)

// xxh64 is a streaming XXH64 state with seed 0.
type xxh64 struct {
	v     [4]uint64
	total uint64
	buf   [32]byte
	nbuf  int
}

func (x *xxh64) reset() {
	p1 := xxPrime1 // a variable, so the sums below wrap as XXH64 wants
	*x = xxh64{v: [4]uint64{p1 + xxPrime2, xxPrime2, 0, -p1}}
}

func xxRound(acc, in uint64) uint64 {
	acc += in * xxPrime2
	acc = bits.RotateLeft64(acc, 31)
	return acc * xxPrime1
}

func xxMerge(h, v uint64) uint64 {
	h ^= xxRound(0, v)
	return h*xxPrime1 + xxPrime4
}

// stripes folds whole 32-byte stripes of b into the accumulators and
// returns how many bytes it used.
func (x *xxh64) stripes(b []byte) int {
	v0, v1, v2, v3 := x.v[0], x.v[1], x.v[2], x.v[3]
	n := 0
	for ; len(b)-n >= 32; n += 32 {
		s := b[n : n+32]
		v0 = xxRound(v0, binary.LittleEndian.Uint64(s[0:]))
		v1 = xxRound(v1, binary.LittleEndian.Uint64(s[8:]))
		v2 = xxRound(v2, binary.LittleEndian.Uint64(s[16:]))
		v3 = xxRound(v3, binary.LittleEndian.Uint64(s[24:]))
	}
	x.v = [4]uint64{v0, v1, v2, v3}
	return n
}

func (x *xxh64) write(b []byte) {
	x.total += uint64(len(b))
	if x.nbuf > 0 {
		n := copy(x.buf[x.nbuf:], b)
		x.nbuf += n
		b = b[n:]
		if x.nbuf < 32 {
			return
		}
		x.stripes(x.buf[:])
		x.nbuf = 0
	}
	n := x.stripes(b)
	x.nbuf = copy(x.buf[:], b[n:])
}

func (x *xxh64) sum() uint64 {
	var h uint64
	if x.total >= 32 {
		v := x.v
		h = bits.RotateLeft64(v[0], 1) + bits.RotateLeft64(v[1], 7) +
			bits.RotateLeft64(v[2], 12) + bits.RotateLeft64(v[3], 18)
		for _, a := range v {
			h = xxMerge(h, a)
		}
	} else {
		h = xxPrime5
	}
	h += x.total
	b := x.buf[:x.nbuf]
	for ; len(b) >= 8; b = b[8:] {
		h ^= xxRound(0, binary.LittleEndian.Uint64(b))
		h = bits.RotateLeft64(h, 27)*xxPrime1 + xxPrime4
	}
	if len(b) >= 4 {
		h ^= uint64(binary.LittleEndian.Uint32(b)) * xxPrime1
		h = bits.RotateLeft64(h, 23)*xxPrime2 + xxPrime3
		b = b[4:]
	}
	for _, c := range b {
		h ^= uint64(c) * xxPrime5
		h = bits.RotateLeft64(h, 11) * xxPrime1
	}
	h ^= h >> 33
	h *= xxPrime2
	h ^= h >> 29
	h *= xxPrime3
	h ^= h >> 32
	return h
}
