package symbolize

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/rewindstack/rewind/internal/elfdata"
	"io"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"unsafe"
)

// inflater decodes a zlib stream (RFC 1950 around RFC 1951 DEFLATE) held
// whole in memory into a buffer of the decompressed size, which ELF's
// compression header gives: a compressed debug section. It is about 3.3
// times as fast as compress/flate for this (no io.ByteReader per input
// byte, a 64-bit bit buffer refilled eight bytes at a time, the output
// buffer as the window, every code found in one or two table lookups, a
// fast loop without end checks in a function of its own; libc's 5.8 MB
// of .debug_info in 11.0 ms, compress/zlib 36 ms: go test ./symbolize
// -bench Inflate on a 2-core AMD EPYC VM), and it stops and resumes at
// any size asked for, so that a caller can decompress a prefix of a
// section and go on later.
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

	mapping *fileMap // what in is mapped from (nil: in is Go memory)
}

var (
	errInflate    = errors.New("inflate: corrupt stream")
	errTruncated  = errors.New("inflate: truncated stream")
	errUnreadable = errors.New("inflate: section unreadable (the file changed?)")
)

// litBits and dstBits are the widths of the direct lookup of the
// literal/length and the distance codes: a longer code (up to 15 bits) is
// found in a second lookup, in a subtable of its first bits. With 11 bits,
// 98.6% of the symbols of libc's .debug_info and 90% of its .debug_line
// are found in the first lookup (measured with 10 bits).
const (
	litBits = 11
	dstBits = 10
	maxBits = 15
)

// huffTable is a canonical Huffman code as a lookup table: root is
// indexed by the next rootBits bits of the input (Deflate sends a code
// from its first bit, so by the code reversed); an entry says the
// symbol's code length and what it means (see the kinds), or, for codes
// longer than rootBits, where their subtable starts in sub (indexed by
// the following maxBits-rootBits bits).
type huffTable struct {
	root  [1 << litBits]uint32
	sub   []uint32
	nsyms int
}

// Entries: bits 0-3 the code's length, 4-7 the extra bits that follow it,
// 8-10 the kind, 16-31 the value: a literal byte, a match length or
// distance base, a subtable's offset. The zero entry is kindBad: a code
// the table does not have.
const (
	kindBad     = 0 << 8
	kindLiteral = 1 << 8 // also: a code length code, a distance
	kindLength  = 2 << 8
	kindEnd     = 3 << 8
	kindSub     = 4 << 8
	kindMask    = 7 << 8

	// litFlag marks the literals of a literal/length table, for the
	// fast loop's test (a sign).
	litFlag = 1 << 31
)

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

// build makes t the canonical code of lens, looked up rootBits bits
// first; false if the lengths over-subscribe the code space (an
// incomplete code is allowed: its unused codes decode as kindBad).
func (t *huffTable) build(lens []uint8, rootBits uint, entry func(sym int) uint32) bool {
	var count [maxBits + 1]uint16
	for _, l := range lens {
		count[l]++
	}
	count[0] = 0
	left := 1
	for l := 1; l <= maxBits; l++ {
		left = left<<1 - int(count[l])
		if left < 0 {
			return false
		}
	}
	var offs [maxBits + 2]uint16
	for l := 1; l <= maxBits; l++ {
		offs[l+1] = offs[l] + count[l]
	}
	var syms [288]uint16 // by length, then value
	t.nsyms = 0
	for s, l := range lens {
		if l != 0 {
			syms[offs[l]] = uint16(s)
			offs[l]++
			t.nsyms++
		}
	}
	root := t.root[:1<<rootBits]
	clear(root)
	t.sub = t.sub[:0]
	subBits := maxBits - rootBits
	code, i := 0, 0
	for l := uint(1); l <= maxBits; l++ {
		for k := 0; k < int(count[l]); k, i, code = k+1, i+1, code+1 {
			rev := 0
			for b := uint(0); b < l; b++ {
				rev |= (code >> b & 1) << (l - 1 - b)
			}
			e := entry(int(syms[i])) | uint32(l)
			if l <= rootBits {
				for j := rev; j < 1<<rootBits; j += 1 << l {
					root[j] = e
				}
				continue
			}
			// A longer code: its first rootBits bits lead to a subtable
			// of the next subBits bits, made when the first code with
			// that prefix comes.
			prefix := rev & (1<<rootBits - 1)
			if root[prefix]&kindMask != kindSub {
				root[prefix] = kindSub | uint32(len(t.sub))<<16
				t.sub = append(t.sub, make([]uint32, 1<<subBits)...)
			}
			sub := t.sub[root[prefix]>>16:][:1<<subBits]
			for j := rev >> rootBits; j < 1<<subBits; j += 1 << (l - rootBits) {
				sub[j] = e
			}
		}
		code <<= 1
	}
	return true
}

func plainEntry(sym int) uint32 { return uint32(sym)<<16 | kindLiteral }

func litEntry(sym int) uint32 {
	switch {
	case sym < 256:
		return litFlag | uint32(sym)<<16 | kindLiteral
	case sym == 256:
		return kindEnd
	case sym < 257+29:
		return uint32(lenBase[sym-257])<<16 | uint32(lenExtra[sym-257])<<4 | kindLength
	}
	return kindBad
}

func distEntry(sym int) uint32 {
	if sym < 30 {
		return dstBase[sym]<<16 | uint32(dstExtra[sym])<<4 | kindLiteral
	}
	return kindBad
}

// lookup returns the entry of t for the code at the start of bits (which
// must hold at least 15 bits, zeros past the input's end), the table's
// first lookup rootBits wide.
func (t *huffTable) lookup(bits uint64, rootBits uint) uint32 {
	e := t.root[bits&(1<<rootBits-1)&(1<<litBits-1)]
	if e&kindMask == kindSub {
		sub := t.sub[e>>16:]
		e = sub[(bits>>rootBits)&(1<<(maxBits-rootBits)-1)]
	}
	return e
}

// subEntry returns the entry in the subtable e leads to for the code at
// the start of bits: lookup's second step, kept out of huffman's fast
// loop (which it would otherwise crowd out of registers).
//
//go:noinline
func (t *huffTable) subEntry(e uint32, bits uint64, rootBits uint) uint32 {
	return t.sub[e>>16:][(bits>>rootBits)&(1<<(maxBits-rootBits)-1)]
}

// decode reads one symbol of t, whose entries are plainEntry; -1 for a
// code t does not have. The buffer must hold at least 15 bits.
func (f *inflater) decode(t *huffTable) int {
	e := t.lookup(f.bits, litBits)
	if e&kindMask == kindBad {
		return -1
	}
	f.take(uint(e & 15))
	return int(e >> 16)
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
	fixedLit.build(lens[:], litBits, litEntry)
	var d [30]uint8
	for i := range d {
		d[i] = 5
	}
	fixedDst.build(d[:], dstBits, distEntry)
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
//
// Input mapped from a file (see sectionInflater) is read with faults
// turned into panics: a file cut short under the mapping makes an error
// of the stream, not a SIGBUS. The mapping is released once the stream
// has given all it will.
func (f *inflater) run(limit int) (err error) {
	if f.mapping == nil {
		return f.decode1(limit)
	}
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if p := recover(); p != nil {
			if _, fault := p.(interface{ Addr() uintptr }); !fault {
				panic(p)
			}
			f.err = errUnreadable
			err = f.err
		}
		if f.done || f.err != nil || f.n == len(f.out) {
			f.in = nil
			f.mapping.release()
			f.mapping = nil
		}
	}()
	return f.decode1(limit)
}

// decode1 is run's loop.
func (f *inflater) decode1(limit int) error {
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
	if !clt.build(cl[:], litBits, plainEntry) || clt.nsyms == 0 {
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
	if lens[256] == 0 || !f.lit.build(lens[:nlit], litBits, litEntry) || !f.dist.build(lens[nlit:nlit+ndist], dstBits, distEntry) {
		return errInflate
	}
	return nil
}

// load64 reads the little-endian word at p+off; store64 writes one at p.
func load64(p unsafe.Pointer, off int) uint64 {
	return binary.LittleEndian.Uint64((*[8]byte)(unsafe.Add(p, off))[:])
}

func store64(p unsafe.Pointer, v uint64) {
	binary.LittleEndian.PutUint64((*[8]byte)(p)[:], v)
}

// fastIn and fastOut are the input and output room the fast loop of
// huffman needs for one round: a refill of the bit buffer (8 bytes; the
// one before the first round advances at most 7), and two literals or a
// longest match (258 bytes) with the up to 7 bytes its word copy writes
// past it.
const (
	fastIn  = 16
	fastOut = 258 + 8
)

// huffman decodes symbols of the current block until its end or limit:
// first in the fast loop (see fast) while the input and the output have
// room for any symbol, then in a careful loop that checks for their ends.
// The bit buffer lives in locals (the compiler keeps them in registers),
// written back around the slow paths and on return.
func (f *inflater) huffman(limit int) (err error) {
	if f.n < limit && f.pos <= len(f.in)-fastIn && f.n <= len(f.out)-fastOut {
		if done, err := f.fast(limit); done {
			return err
		}
	}
	out, in := f.out, f.in
	n, pos := f.n, f.pos
	bits, nb := f.bits, f.nb
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
		e := f.lit.lookup(bits, litBits)
		l := uint(e & 15)
		bits >>= l
		nb -= l
		switch e & kindMask {
		case kindLiteral:
			out[n] = byte(e >> 16)
			n++
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
		d := f.dist.lookup(bits, dstBits)
		if d&kindMask == kindBad {
			err = errInflate
			break
		}
		l = uint(d & 15)
		bits >>= l
		nb -= l
		de := uint(d >> 4 & 15)
		dist := int(d>>16) + int(bits&(1<<de-1))
		bits >>= de
		nb -= de
		if dist > n || length > len(out)-n {
			err = errInflate
			break
		}
		if dist >= length {
			copy(out[n:n+length], out[n-dist:n])
			n += length
		} else {
			for end := n + length; n < end; n++ {
				out[n] = out[n-dist]
			}
		}
	}
	f.n, f.pos, f.bits, f.nb = n, pos, bits, nb
	return err
}

// fast is huffman's fast loop: while the input and the output have room
// for any symbol (fastIn, fastOut) it runs without checking for their
// ends, filling the bit buffer to at least 56 bits without a branch and
// then decoding up to two literals, or a length and a distance, from it.
// It is a function of its own, and reads and writes through the buffers'
// base pointers, so that its state keeps to registers: with the careful
// loop in the same function, and bounds checks, its variables were
// spilled and reloaded in every round (libc's .debug_info: 12.5 ms
// against 11.0 ms now). done reports that the block ended, or failed
// with err.
func (f *inflater) fast(limit int) (done bool, err error) {
	out, in := f.out, f.in
	n, pos := f.n, f.pos
	bits, nb := f.bits, f.nb
	lit, dst := &f.lit.root, &f.dist.root
	// The loop's conditions keep every access inside in and out
	// (fastIn, fastOut; dist is at most n).
	ib, ob := unsafe.Pointer(unsafe.SliceData(in)), unsafe.Pointer(unsafe.SliceData(out))
	inEnd, outEnd := len(in)-fastIn, min(limit, len(out)-fastOut+1)
	// Each round starts with at least 56 bits in the buffer (a
	// literal/length code and its extra bits, 20, and a distance code and
	// its extra bits, 28, fit) and the entry of the next code looked up:
	// the load is under way while the previous round finishes.
	bits |= load64(ib, pos) << (nb & 63)
	pos += int((63 - nb) >> 3)
	nb |= 56
	e := lit[bits&(1<<litBits-1)]
	for n < outEnd && pos <= inEnd {
		if e&kindMask == kindSub {
			e = f.lit.subEntry(e, bits, litBits)
		}
		if int32(e) < 0 {
			// Up to two literals (30 bits) from one refill, and
			// the next entry from the 26 left.
			l := uint(e & 15)
			bits >>= l
			nb -= l
			*(*byte)(unsafe.Add(ob, n)) = byte(e >> 16)
			n++
			e = lit[bits&(1<<litBits-1)]
			if int32(e) < 0 {
				l := uint(e & 15)
				bits >>= l
				nb -= l
				*(*byte)(unsafe.Add(ob, n)) = byte(e >> 16)
				n++
				e = lit[bits&(1<<litBits-1)]
			}
			bits |= load64(ib, pos) << (nb & 63)
			pos += int((63 - nb) >> 3)
			nb |= 56
			continue
		}
		if e&kindMask != kindLength {
			if e&kindMask == kindEnd {
				l := uint(e & 15)
				bits >>= l
				nb -= l
				f.inBlock = false
			} else {
				err = errInflate
			}
			f.n, f.pos, f.bits, f.nb = n, pos, bits, nb
			return true, err
		}
		l := uint(e & 15)
		bits >>= l
		nb -= l
		le := uint(e >> 4 & 15)
		length := int(e>>16) + int(bits&(1<<le-1))
		bits >>= le
		nb -= le
		d := dst[bits&(1<<dstBits-1)]
		if d&kindMask == kindSub {
			d = f.dist.subEntry(d, bits, dstBits)
		}
		if d&kindMask == kindBad {
			f.n, f.pos, f.bits, f.nb = n, pos, bits, nb
			return true, errInflate
		}
		l = uint(d & 15)
		bits >>= l
		nb -= l
		de := uint(d >> 4 & 15)
		dist := int(d>>16) + int(bits&(1<<de-1))
		bits >>= de
		nb -= de
		if dist > n {
			f.n, f.pos, f.bits, f.nb = n, pos, bits, nb
			return true, errInflate
		}
		bits |= load64(ib, pos) << (nb & 63)
		pos += int((63 - nb) >> 3)
		nb |= 56
		e = lit[bits&(1<<litBits-1)]
		to, from := unsafe.Add(ob, n), unsafe.Add(ob, n-dist)
		if dist >= 8 {
			// Eight bytes at a time, each word read from bytes
			// already written; up to seven bytes past the match are
			// written too, and overwritten by what follows.
			store64(to, load64(from, 0))
			for i := 8; i < length; i += 8 {
				store64(unsafe.Add(to, i), load64(from, i))
			}
		} else {
			// Overlapping: the copied bytes repeat with period dist.
			for i := range length {
				*(*byte)(unsafe.Add(to, i)) = *(*byte)(unsafe.Add(from, i))
			}
		}
		n += length
	}
	f.n, f.pos, f.bits, f.nb = n, pos, bits, nb
	return false, nil
}

// BuffersOutsideHeap makes the buffers that compressed debug sections of
// megabytes are decompressed into (from then on) be mapped outside the Go
// heap, never to be unmapped, instead of allocated in it: Go zeroes a
// buffer it allocates where its heap was used before (as after
// hugeheap.Reserve), touching every page of it at once, while fresh
// mappings are zero and touched only as far as the decompression goes
// (libc's .debug_info: 70% of it in a dump of the 17-thread fixture).
// For short-lived commands (dump) only, which keep what they decompress
// to the end. It does nothing where mapping is not supported.
func BuffersOutsideHeap(on bool) { outsideHeap.Store(on) }

var outsideHeap atomic.Bool

// zlibSection returns the zlib stream of s, a section of ef compressed
// with ELFCOMPRESS_ZLIB, read from r (the file); ok is false for any
// other section (not compressed, zstd, legacy .zdebug) or a read error.
func zlibSection(r io.ReaderAt, ef *elf.File, s *elf.Section) ([]byte, bool) {
	if s.Flags&elf.SHF_COMPRESSED == 0 || s.Type == elf.SHT_NOBITS || s.FileSize > elfdata.MaxSection {
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

// sectionInflater returns an inflater of s, a section of ef compressed
// with ELFCOMPRESS_ZLIB, into a buffer of its decompressed size (from
// bigBuffer); ok is false for any other section (as zlibSection). The
// compressed bytes are mapped from the file where they can be (Linux, r
// an *os.File) rather than read: reading libc's 3 MB of compressed
// debug sections copied them into fresh pages, whose faults and copying
// cost a cold dump about 2 ms of CPU (5% of its samples).
func sectionInflater(r io.ReaderAt, ef *elf.File, s *elf.Section) (f *inflater, ok bool, err error) {
	hdr := uint64(24) // Chdr64: type, reserved, size, alignment
	if ef.Class == elf.ELFCLASS32 {
		hdr = 12 // Chdr32: type, size, alignment
	}
	if s.Flags&elf.SHF_COMPRESSED == 0 || s.Type == elf.SHT_NOBITS || s.FileSize > elfdata.MaxSection || s.FileSize < hdr+2 {
		return nil, false, nil
	}
	m := mapFile(r, int64(s.Offset), int64(s.FileSize))
	if m == nil {
		z, ok := zlibSection(r, ef, s)
		if !ok {
			return nil, false, nil
		}
		if s.Size > elfdata.MaxSection || s.Size/2048 > s.FileSize {
			return nil, true, fmt.Errorf("section %s: implausible size %d", s.Name, s.Size)
		}
		f, err := newInflater(z, bigBuffer(s.Size))
		return f, true, err
	}
	raw := m.data
	if elf.CompressionType(ef.ByteOrder.Uint32(raw)) != elf.COMPRESS_ZLIB {
		m.release()
		return nil, false, nil
	}
	if s.Size > elfdata.MaxSection || s.Size/2048 > s.FileSize {
		m.release()
		return nil, true, fmt.Errorf("section %s: implausible size %d", s.Name, s.Size)
	}
	f, err = newInflater(raw[hdr:], bigBuffer(s.Size))
	if err != nil {
		m.release()
		return nil, true, err
	}
	f.mapping = m
	runtime.AddCleanup(f, func(m *fileMap) { m.release() }, m)
	return f, true, nil
}

// inflateSection decompresses s (of ef, read from r) whole if it is
// zlib-compressed; ok is false if it is not, and the caller reads it
// otherwise.
func inflateSection(r io.ReaderAt, ef *elf.File, s *elf.Section) (data []byte, ok bool, err error) {
	f, ok, err := sectionInflater(r, ef, s)
	if !ok {
		return nil, false, nil
	}
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
