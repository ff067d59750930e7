package zstd

import (
	"encoding/binary"
	"fmt"
)

// Decoder states: what the next input bytes are.
const (
	stMagic    = iota // a frame's magic number, or end of stream
	stHeader          // the rest of a Zstandard frame header
	stBlock           // a block header and its content
	stChecksum        // the 4-byte content checksum ending a frame
	stSkip            // the content of a skippable frame
)

const (
	frameMagic     = 0xFD2FB528
	skippableMagic = 0x184D2A50 // low 4 bits are free
	skippableMask  = 0xFFFFFFF0
	maxBlockSize   = 128 << 10 // Block_Maximum_Size ceiling
)

// Decoder decompresses one stream of Zstandard frames fed in arbitrary
// chunks. Input that ends partway through a frame header or block is kept
// until a later Decode call completes it; the last window of output is kept
// as match history, so the caller may reuse or discard what Decode returned.
// A Decoder is not safe for concurrent use. After an error every later call
// returns the same error.
type Decoder struct {
	maxWindow int
	state     int
	in        []byte // buffered input: part of one unit
	pos       int64  // input offset of the first byte not yet consumed
	err       error
	skip      uint64 // bytes of a skippable frame still to skip
	outLimit  uint64 // 0, or the most output the stream may produce
	totalOut  uint64 // output produced over all frames

	// Current frame.
	fh       frameHeader
	window   int    // bytes of history matches may reach
	blockMax int    // Block_Maximum_Size
	frameOut uint64 // bytes produced so far
	hist     []byte // recent output: at least the last window bytes
	xxh      xxh64

	// Entropy state carried from block to block within a frame.
	rep    [3]int
	huf    hufTable
	hufOK  bool
	llTab  *seqTable
	ofTab  *seqTable
	mlTab  *seqTable
	llOwn  seqTable
	ofOwn  seqTable
	mlOwn  seqTable
	litBuf []byte
}

// NewDecoder returns a Decoder that refuses frames whose window (for
// single-segment frames, the content size) exceeds maxWindow bytes, with an
// error wrapping ErrWindowTooLarge. The history it keeps is bounded by
// about 1.5 windows plus two blocks.
func NewDecoder(maxWindow int) *Decoder {
	if maxWindow < 0 {
		maxWindow = 0
	}
	buildPredefined()
	return &Decoder{maxWindow: maxWindow}
}

// LimitOutput makes Decode fail with an error wrapping ErrOutputLimit once
// the stream's total output would exceed n bytes (0: no limit, the
// default). Without a limit, output is bounded only by what the input
// declares: RLE blocks expand about 32768 times.
func (d *Decoder) LimitOutput(n uint64) { d.outLimit = n }

// Reset makes d ready for a new stream, keeping its buffers and limits.
func (d *Decoder) Reset() {
	*d = Decoder{maxWindow: d.maxWindow, outLimit: d.outLimit, in: d.in[:0], hist: d.hist[:0], litBuf: d.litBuf}
}

// Decode feeds the next compressed bytes of the stream, appends whatever
// output they complete to dst and returns it. Bytes of an incomplete unit
// (frame header, block, checksum) are buffered, at most one block's worth.
func (d *Decoder) Decode(dst, src []byte) ([]byte, error) {
	if d.err != nil {
		return dst, d.err
	}
	var err error
	// Finish the buffered unit first, taking from src only what it needs.
	for len(d.in) > 0 {
		var n, need int
		dst, n, need, err = d.step(dst, d.in)
		if err != nil {
			d.err = err
			return dst, err
		}
		if n > 0 {
			d.pos += int64(n)
			d.in = d.in[:copy(d.in, d.in[n:])]
			continue
		}
		take := min(need-len(d.in), len(src))
		if take == 0 {
			return dst, nil
		}
		d.in = append(d.in, src[:take]...)
		src = src[take:]
	}
	for len(src) > 0 {
		var n int
		dst, n, _, err = d.step(dst, src)
		if err != nil {
			d.err = err
			return dst, err
		}
		if n == 0 {
			d.in = append(d.in[:0], src...)
			break
		}
		d.pos += int64(n)
		src = src[n:]
	}
	return dst, nil
}

// Close reports an error wrapping ErrTruncated if the input seen so far
// ends inside a frame header, a block, a content checksum or a skippable
// frame. A frame that stops cleanly after a block without its last block
// is not an error: perf never ends its frame. Close does not release
// anything; the Decoder must not be fed again unless Reset.
func (d *Decoder) Close() error {
	if d.err != nil {
		return d.err
	}
	var what string
	switch d.state {
	case stMagic:
		if len(d.in) > 0 {
			what = "frame magic"
		}
	case stHeader:
		what = "frame header"
	case stBlock:
		if len(d.in) > 0 {
			what = "block"
		}
	case stChecksum:
		what = "content checksum"
	case stSkip:
		what = "skippable frame"
	}
	if what == "" {
		return nil
	}
	return &Error{Offset: d.pos, Err: fmt.Errorf("%w in %s", ErrTruncated, what)}
}

// step decodes one unit from the start of buf. It returns the grown dst and
// the number of bytes consumed; when buf holds only part of the unit it
// consumes nothing and returns how many bytes the unit needs at least.
func (d *Decoder) step(dst, buf []byte) ([]byte, int, int, error) {
	fail := func(off int, err error) ([]byte, int, int, error) {
		return dst, 0, 0, &Error{Offset: d.pos + int64(off), Err: err}
	}
	switch d.state {
	case stMagic:
		if len(buf) < 4 {
			return dst, 0, 4, nil
		}
		m := binary.LittleEndian.Uint32(buf)
		if m == frameMagic {
			d.state = stHeader
			return dst, 4, 0, nil
		}
		if m&skippableMask != skippableMagic {
			return fail(0, fmt.Errorf("bad magic number %#08x", m))
		}
		if len(buf) < 8 {
			return dst, 0, 8, nil
		}
		d.skip = uint64(binary.LittleEndian.Uint32(buf[4:]))
		if d.skip > 0 {
			d.state = stSkip
		}
		return dst, 8, 0, nil

	case stSkip:
		if len(buf) == 0 {
			return dst, 0, 1, nil
		}
		n := uint64(len(buf))
		if n > d.skip {
			n = d.skip
		}
		d.skip -= n
		if d.skip == 0 {
			d.state = stMagic
		}
		return dst, int(n), 0, nil

	case stHeader:
		if len(buf) < 1 {
			return dst, 0, 1, nil
		}
		size := frameHeaderSize(buf[0])
		if len(buf) < size {
			return dst, 0, size, nil
		}
		fh, off, err := parseFrameHeader(buf[:size])
		if err != nil {
			return fail(off, err)
		}
		if fh.window > uint64(d.maxWindow) {
			return fail(0, fmt.Errorf("%w: window %d > %d", ErrWindowTooLarge, fh.window, d.maxWindow))
		}
		d.startFrame(fh)
		d.state = stBlock
		return dst, size, 0, nil

	case stBlock:
		if len(buf) < 3 {
			return dst, 0, 3, nil
		}
		h := uint32(buf[0]) | uint32(buf[1])<<8 | uint32(buf[2])<<16
		last := h&1 != 0
		typ := int(h>>1) & 3
		size := int(h >> 3)
		if typ == blockReserved {
			return fail(0, corrupt("reserved block type"))
		}
		if size > d.blockMax {
			return fail(0, fmt.Errorf("block size %d exceeds maximum %d", size, d.blockMax))
		}
		csize := size
		if typ == blockRLE {
			csize = 1
		}
		if len(buf) < 3+csize {
			return dst, 0, 3 + csize, nil
		}
		var err error
		dst, err = d.decodeBlock(dst, typ, buf[3:3+csize], size)
		if err != nil {
			return fail(0, err)
		}
		if last {
			if d.fh.hasFCS && d.frameOut != d.fh.fcs {
				return fail(0, fmt.Errorf("frame produced %d bytes, header declared %d", d.frameOut, d.fh.fcs))
			}
			if d.fh.checksum {
				d.state = stChecksum
			} else {
				d.state = stMagic
			}
		}
		return dst, 3 + csize, 0, nil

	case stChecksum:
		if len(buf) < 4 {
			return dst, 0, 4, nil
		}
		want := binary.LittleEndian.Uint32(buf)
		if got := uint32(d.xxh.sum()); got != want {
			return fail(0, fmt.Errorf("%w: %#08x, computed %#08x", ErrChecksum, want, got))
		}
		d.state = stMagic
		return dst, 4, 0, nil
	}
	panic("zstd: bad decoder state")
}

// startFrame resets the per-frame state for a frame with header fh.
func (d *Decoder) startFrame(fh frameHeader) {
	d.fh = fh
	d.window = int(fh.window)
	d.blockMax = min(d.window, maxBlockSize)
	d.frameOut = 0
	d.hist = d.hist[:0]
	d.xxh.reset()
	d.rep = [3]int{1, 4, 8}
	d.hufOK = false
	d.llTab, d.ofTab, d.mlTab = nil, nil, nil
}
