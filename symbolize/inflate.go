package symbolize

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// inflater decodes a zlib stream (RFC 1950 around RFC 1951 DEFLATE) held
// whole in memory into a buffer of the decompressed size, which ELF's
// compression header gives: a compressed debug section. It is about twice
// as fast as compress/flate for this (no io.ByteReader per input byte, a
// 64-bit bit buffer refilled eight bytes at a time, the output buffer as
// the window), and it stops and resumes at any size asked for, so that a
// caller can decompress a prefix of a section and go on later.
//
// The Adler-32 checksum is not checked: a prefix has none to check, and
// what is decompressed is parsed as untrusted anyway. Corrupt input gives
// an error, never a panic or a read outside the input.
type inflater struct {
	in   []byte
	pos  int    // next input byte
	bits uint64 // bit buffer, next bit lowest
	nb   uint   // bits in it
	over uint   // zero bytes added to it past the end of in

	out []byte
	n   int // bytes written

	final   bool // the current block is the last
	inBlock bool // inside a Huffman-coded block (lit, dist)
	stored  int  // bytes left of a stored block (inBlock false)
	done    bool
	err     error

	lit, dist huffTable
}

var (
	errInflate   = errors.New("inflate: corrupt stream")
	errTruncated = errors.New("inflate: truncated stream")
)

// fastBits is the width of a Huffman table's direct lookup; longer codes
// (rare, by design of the code) are decoded bit by bit.
const fastBits = 10

// huffTable is a canonical Huffman code. Its fast entries say, besides
// the code's length, what the symbol means (see entry), so that decoding
// a match needs no further table.
type huffTable struct {
	fast  [1 << fastBits]uint32 // entry of the symbol | code length; 0: longer code, or none
	count [16]uint16            // codes of each length
	syms  [288]uint16           // symbols by length, then value
	nsyms int
}

// newInflater starts decoding the zlib stream in into out.
func newInflater(in, out []byte) (*inflater, error) {
	if len(in) < 2 {
		return nil, errTruncated
	}
	cmf, flg := in[0], in[1]
	if cmf&0x0f != 8 || cmf>>4 > 7 || (uint(cmf)<<8|uint(flg))%31 != 0 || flg&0x20 != 0 {
		return nil, errors.New("inflate: not a zlib stream")
	}
	return &inflater{in: in, pos: 2, out: out}, nil
}

// refill puts at least 56 bits in the buffer (zeros past the input's end,
// counted in over).
func (f *inflater) refill() {
	if f.pos+8 <= len(f.in) {
		f.bits |= binary.LittleEndian.Uint64(f.in[f.pos:]) << f.nb
		adv := (63 - f.nb) >> 3
		f.pos += int(adv)
		f.nb += adv << 3
		return
	}
	for f.nb <= 56 {
		if f.pos < len(f.in) {
			f.bits |= uint64(f.in[f.pos]) << f.nb
			f.pos++
		} else {
			f.over++
		}
		f.nb += 8
	}
}

// take removes n (at most 32) bits from the buffer, which must hold them.
func (f *inflater) take(n uint) uint32 {
	v := uint32(f.bits & (1<<n - 1))
	f.bits >>= n
	f.nb -= n
	return v
}

// build makes t the canonical code of lens; false if the lengths
// over-subscribe the code space (an incomplete code is allowed: its
// unused codes decode as errors).
func (t *huffTable) build(lens []uint8, entry func(sym int) uint32) bool {
	t.count = [16]uint16{}
	for _, l := range lens {
		t.count[l]++
	}
	t.count[0] = 0
	left := 1
	for l := 1; l < 16; l++ {
		left = left<<1 - int(t.count[l])
		if left < 0 {
			return false
		}
	}
	var offs [16]uint16
	for l := 1; l < 15; l++ {
		offs[l+1] = offs[l] + t.count[l]
	}
	t.nsyms = 0
	for s, l := range lens {
		if l != 0 {
			t.syms[offs[l]] = uint16(s)
			offs[l]++
			t.nsyms++
		}
	}
	t.fast = [1 << fastBits]uint32{}
	code := 0
	i := 0
	for l := 1; l < 16; l++ {
		for k := 0; k < int(t.count[l]); k, i, code = k+1, i+1, code+1 {
			if l > fastBits {
				continue
			}
			// Deflate sends a code's bits from its most significant one:
			// the table is indexed by the code reversed.
			rev := 0
			for b := 0; b < l; b++ {
				rev |= (code >> b & 1) << (l - 1 - b)
			}
			e := entry(int(t.syms[i])) | uint32(l)
			for j := rev; j < 1<<fastBits; j += 1 << l {
				t.fast[j] = e
			}
		}
		code <<= 1
	}
	return true
}

// Entries: bits 0-3 the code's length (0 in an entry made for a symbol
// decoded bit by bit), 4-7 the extra bits that follow it, 8-9 the kind,
// 16-31 the value: a literal byte, a match length or distance base.
const (
	kindLiteral = 0 << 8 // also: a code length code, a distance
	kindLength  = 1 << 8
	kindEnd     = 2 << 8
	kindBad     = 3 << 8
)

func plainEntry(sym int) uint32 { return uint32(sym) << 16 }

func litEntry(sym int) uint32 {
	switch {
	case sym < 256:
		return uint32(sym)<<16 | kindLiteral
	case sym == 256:
		return kindEnd
	case sym < 257+29:
		return uint32(lenBase[sym-257])<<16 | uint32(lenExtra[sym-257])<<4 | kindLength
	}
	return kindBad
}

func distEntry(sym int) uint32 {
	if sym < 30 {
		return dstBase[sym]<<16 | uint32(dstExtra[sym])<<4
	}
	return kindBad
}

// decode reads one symbol of t, whose entries are plainEntry; -1 for a
// code t does not have. The buffer must hold at least 15 bits.
func (f *inflater) decode(t *huffTable) int {
	if e := t.fast[f.bits&(1<<fastBits-1)]; e != 0 {
		f.take(uint(e & 15))
		return int(e >> 16)
	}
	return f.decodeSlow(t)
}

// decodeSlow reads one symbol bit by bit, the canonical way.
func (f *inflater) decodeSlow(t *huffTable) int {
	code, first, index := 0, 0, 0
	for l := 1; l < 16; l++ {
		code |= int(f.take(1))
		count := int(t.count[l])
		if code-first < count {
			return int(t.syms[index+code-first])
		}
		index += count
		first = (first + count) << 1
		code <<= 1
	}
	return -1
}

var (
	fixedOnce          sync.Once
	fixedLit, fixedDst huffTable
)

func fixedTables() {
	var lens [288]uint8
	for i := range lens {
		switch {
		case i < 144:
			lens[i] = 8
		case i < 256:
			lens[i] = 9
		case i < 280:
			lens[i] = 7
		default:
			lens[i] = 8
		}
	}
	fixedLit.build(lens[:], litEntry)
	var d [30]uint8
	for i := range d {
		d[i] = 5
	}
	fixedDst.build(d[:], distEntry)
}

var (
	lenBase  = [29]uint16{3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258}
	lenExtra = [29]uint8{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0}
	dstBase  = [30]uint32{1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577}
	dstExtra = [30]uint8{0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13}
	clOrder  = [19]uint8{16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15}
)

// run decodes until at least limit bytes are out (or the stream or the
// output ends); it returns the error that stopped the stream, if any.
func (f *inflater) run(limit int) error {
	limit = min(limit, len(f.out))
	for f.n < limit && !f.done && f.err == nil {
		switch {
		case f.inBlock:
			f.err = f.huffman(limit)
		case f.stored > 0:
			f.copyStored(limit)
		default:
			if f.final {
				f.done = true
				break
			}
			f.err = f.header()
		}
		if f.over > 8 && f.err == nil {
			f.err = errTruncated
		}
	}
	return f.err
}

// header reads a block header.
func (f *inflater) header() error {
	f.refill()
	f.final = f.take(1) == 1
	switch f.take(2) {
	case 0:
		// Stored: from the next byte boundary, LEN and its complement.
		f.take(f.nb & 7)
		back := int(f.nb>>3) - int(f.over) // bytes read ahead
		if back < 0 || back > f.pos {
			return errTruncated
		}
		f.pos -= back
		f.bits, f.nb, f.over = 0, 0, 0
		if len(f.in)-f.pos < 4 {
			return errTruncated
		}
		n := binary.LittleEndian.Uint16(f.in[f.pos:])
		if ^n != binary.LittleEndian.Uint16(f.in[f.pos+2:]) {
			return errInflate
		}
		f.pos += 4
		f.stored = int(n)
		if n == 0 {
			return nil
		}
		if len(f.in)-f.pos < f.stored {
			return errTruncated
		}
	case 1:
		fixedOnce.Do(fixedTables)
		f.lit, f.dist = fixedLit, fixedDst
		f.inBlock = true
	case 2:
		if err := f.dynamic(); err != nil {
			return err
		}
		f.inBlock = true
	default:
		return errInflate
	}
	return nil
}

// copyStored copies what is left of a stored block, up to limit.
func (f *inflater) copyStored(limit int) {
	n := min(f.stored, len(f.out)-f.n, max(limit-f.n, 0))
	if n == 0 {
		f.err = errInflate // more input than output room
		return
	}
	copy(f.out[f.n:], f.in[f.pos:f.pos+n])
	f.n += n
	f.pos += n
	f.stored -= n
}

// dynamic reads the code lengths of a dynamic block and builds its
// tables.
func (f *inflater) dynamic() error {
	f.refill()
	nlit := int(f.take(5)) + 257
	ndist := int(f.take(5)) + 1
	nclen := int(f.take(4)) + 4
	if nlit > 286 || ndist > 30 {
		return errInflate
	}
	var cl [19]uint8
	for i := 0; i < nclen; i++ {
		if f.nb < 3 {
			f.refill()
		}
		cl[clOrder[i]] = uint8(f.take(3))
	}
	var clt huffTable
	if !clt.build(cl[:], plainEntry) || clt.nsyms == 0 {
		return errInflate
	}
	var lens [286 + 30]uint8
	for i := 0; i < nlit+ndist; {
		if f.nb < 32 {
			f.refill()
		}
		sym := f.decode(&clt)
		var rep int
		var val uint8
		switch {
		case sym < 0:
			return errInflate
		case sym < 16:
			lens[i] = uint8(sym)
			i++
			continue
		case sym == 16:
			if i == 0 {
				return errInflate
			}
			val, rep = lens[i-1], 3+int(f.take(2))
		case sym == 17:
			rep = 3 + int(f.take(3))
		default:
			rep = 11 + int(f.take(7))
		}
		if i+rep > nlit+ndist {
			return errInflate
		}
		for ; rep > 0; rep-- {
			lens[i] = val
			i++
		}
	}
	if f.over > 8 {
		return errTruncated
	}
	if lens[256] == 0 || !f.lit.build(lens[:nlit], litEntry) || !f.dist.build(lens[nlit:nlit+ndist], distEntry) {
		return errInflate
	}
	return nil
}

// huffman decodes symbols of the current block until its end or limit.
// The bit buffer lives in locals here (the compiler keeps them in
// registers), written back around the slow paths and on return.
func (f *inflater) huffman(limit int) (err error) {
	out, in := f.out, f.in
	n, pos := f.n, f.pos
	bits, nb := f.bits, f.nb
	lit, dst := &f.lit.fast, &f.dist.fast
	// Locals captured by no closure, so they stay in registers; the
	// slow paths store and reload them.
	for n < limit {
		if nb < 48 {
			if pos+8 <= len(in) {
				bits |= binary.LittleEndian.Uint64(in[pos:]) << nb
				adv := (63 - nb) >> 3
				pos += int(adv)
				nb += adv << 3
			} else {
				f.pos, f.bits, f.nb = pos, bits, nb
				f.refill()
				pos, bits, nb = f.pos, f.bits, f.nb
				if f.over > 8 {
					f.n = n
					return errTruncated
				}
			}
		}
		e := lit[bits&(1<<fastBits-1)]
		if l := uint(e & 15); l != 0 {
			bits >>= l
			nb -= l
		} else {
			f.bits, f.nb = bits, nb
			sym := f.decodeSlow(&f.lit)
			bits, nb = f.bits, f.nb
			if sym < 0 {
				err = errInflate
				break
			}
			e = litEntry(sym)
		}
		switch e & (3 << 8) {
		case kindLiteral:
			out[n] = byte(e >> 16)
			n++
			// At least 33 bits are left: a second literal, if it is one,
			// without going round the loop.
			if e2 := lit[bits&(1<<fastBits-1)]; e2&15 != 0 && e2&(3<<8) == kindLiteral && n < limit {
				l := uint(e2 & 15)
				bits >>= l
				nb -= l
				out[n] = byte(e2 >> 16)
				n++
			}
			continue
		case kindEnd:
			f.inBlock = false
		case kindBad:
			err = errInflate
		}
		if err != nil || !f.inBlock {
			break
		}
		le := uint(e >> 4 & 15)
		length := int(e>>16) + int(bits&(1<<le-1))
		bits >>= le
		nb -= le
		d := dst[bits&(1<<fastBits-1)]
		if l := uint(d & 15); l != 0 {
			bits >>= l
			nb -= l
		} else {
			f.bits, f.nb = bits, nb
			ds := f.decodeSlow(&f.dist)
			bits, nb = f.bits, f.nb
			if ds < 0 {
				err = errInflate
				break
			}
			d = distEntry(ds)
		}
		if d&(3<<8) == kindBad {
			err = errInflate
			break
		}
		de := uint(d >> 4 & 15)
		dist := int(d>>16) + int(bits&(1<<de-1))
		bits >>= de
		nb -= de
		if dist > n || length > len(out)-n {
			err = errInflate
			break
		}
		switch {
		case dist >= 8 && len(out)-n >= length+8:
			// Eight bytes at a time, each word read from bytes already
			// written (dist >= 8); up to seven bytes past the match are
			// written too, and overwritten by what follows.
			for i := 0; i < length; i += 8 {
				binary.LittleEndian.PutUint64(out[n+i:], binary.LittleEndian.Uint64(out[n-dist+i:]))
			}
			n += length
		case dist >= length:
			copy(out[n:n+length], out[n-dist:n])
			n += length
		default:
			// Overlapping: the copied bytes repeat with period dist.
			for end := n + length; n < end; n++ {
				out[n] = out[n-dist]
			}
		}
	}
	f.n, f.pos, f.bits, f.nb = n, pos, bits, nb
	return err
}

// zlibSection returns the zlib stream of s, a section of ef compressed
// with ELFCOMPRESS_ZLIB, read from r (the file); ok is false for any
// other section (not compressed, zstd, legacy .zdebug) or a read error.
func zlibSection(r io.ReaderAt, ef *elf.File, s *elf.Section) ([]byte, bool) {
	if s.Flags&elf.SHF_COMPRESSED == 0 || s.Type == elf.SHT_NOBITS || s.FileSize > maxSection {
		return nil, false
	}
	hdr := 24 // Chdr64: type, reserved, size, alignment
	if ef.Class == elf.ELFCLASS32 {
		hdr = 12 // Chdr32: type, size, alignment
	}
	if s.FileSize < uint64(hdr)+2 {
		return nil, false
	}
	raw := bigBuffer(s.FileSize)
	if n, err := r.ReadAt(raw, int64(s.Offset)); n != len(raw) && err != nil {
		return nil, false
	}
	if elf.CompressionType(ef.ByteOrder.Uint32(raw)) != elf.COMPRESS_ZLIB {
		return nil, false
	}
	return raw[hdr:], true
}

// inflateSection decompresses s (of ef, read from r) whole if it is
// zlib-compressed; ok is false if it is not, and the caller reads it
// otherwise.
func inflateSection(r io.ReaderAt, ef *elf.File, s *elf.Section) (data []byte, ok bool, err error) {
	z, ok := zlibSection(r, ef, s)
	if !ok {
		return nil, false, nil
	}
	if s.Size > maxSection || s.Size/2048 > s.FileSize {
		return nil, true, fmt.Errorf("section %s: implausible size %d", s.Name, s.Size)
	}
	f, err := newInflater(z, bigBuffer(s.Size))
	if err == nil {
		err = f.run(len(f.out))
	}
	if err == nil && f.n != len(f.out) {
		err = errTruncated
	}
	if err != nil {
		return nil, true, fmt.Errorf("section %s: %v", s.Name, err)
	}
	return f.out, true, nil
}
