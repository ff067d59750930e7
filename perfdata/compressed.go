package perfdata

import (
	"encoding/binary"
	"errors"
	"io"

	"github.com/klauspost/compress/zstd"
)

// perf record -z compresses what it reads from the kernel's ring buffers
// with Zstandard and writes it as COMPRESSED records (COMPRESSED2 in newer
// perf: the same with the compressed size given and the record padded to
// 8 bytes). The compressed bytes of all of them are one stream, one frame
// that never ends: each record continues where the last one stopped, and
// the records it decompresses to may begin in one and end in the next.
// perf flushes the stream at the end of every COMPRESSED record, so what
// one holds decompresses before the next is read.
//
// The stream is decompressed into a window of a fixed size that the
// records are decoded from, and reused as soon as they are: a file's
// records take the same memory however far they expand (a crafted stream
// can expand a thousandfold and more, a decompression bomb).

// maxWindow bounds the history a compressed stream may ask to be kept:
// perf compresses with libzstd's defaults for its level (512 KiB at -z's
// level 1, 128 MiB at level 22). (A variable for the fuzz test.)
var maxWindow uint64 = 128 << 20

// maxRatio bounds what the compressed records decompress to, as a
// multiple of the data section's size (at least 1 MiB): perf's level 1
// makes 10-20x of --call-graph dwarf samples, and 11x of -g ones of a
// program that spins in one loop. The records are counted by their
// bytes: what a reader keeps of a sample does not grow with their number
// (rewind report folds samples with the same stack, see profiles'
// Options.Fold), only with what differs between them, which a
// compressed stream must spell out. The limit guards against output
// that is too large to go through, not against memory.
const maxRatio = 128

// streamWindow is the size of the window the records are decompressed
// into: it holds at least one record (at most 64 KiB) besides the start
// of the next.
const streamWindow = 256 << 10

// zstdBlockHeader is the size of a Zstandard block header: the read the
// decoder makes between two blocks.
const zstdBlockHeader = 3

// stream feeds the decoder the compressed bytes of the file's COMPRESSED
// records, walking the data section from the first one on. The records in
// between are delivered as the walk reaches them: the decoder asks for
// the next block only once every byte it decompressed before has been
// read, and perf ends a block at the end of each COMPRESSED record, so
// the records come in file order.
type stream struct {
	f    *File
	w    *walker
	each func(b []byte, off int64, decompressed bool) error
	// data is what is left of the compressed bytes of the COMPRESSED
	// record at at.
	data []byte
	at   int64
	// err is the walk's or the consumer's error, which stopped the
	// decoder.
	err error
	// short says the last read returned less than asked (the decoder
	// reads on in the same request); atBoundary says the input ended
	// where the decoder asked for a block header, not inside anything.
	short, atBoundary bool
}

// payload returns the compressed bytes of the COMPRESSED(2) record b.
func (s *stream) payload(b []byte, typ uint32, off int64) ([]byte, error) {
	data := b[recordHeaderSize:]
	if typ == RecordCompressed2 {
		if len(data) < 8 {
			return nil, s.f.formatErr(off, "COMPRESSED2 record of %d bytes has no data size", len(b))
		}
		n := binary.LittleEndian.Uint64(data)
		data = data[8:]
		if n > uint64(len(data)) {
			return nil, s.f.formatErr(off, "COMPRESSED2 record says %d bytes of data in %d", n, len(data))
		}
		data = data[:n]
	}
	return data, nil
}

// Read gives the decoder the next compressed bytes, walking on to the next
// COMPRESSED record (and delivering the records before it) when the
// current one is used up.
func (s *stream) Read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	for len(s.data) == 0 {
		b, off, err := s.w.next()
		if err != nil {
			s.err = err
			return 0, err
		}
		if b == nil {
			s.atBoundary = !s.short && len(p) == zstdBlockHeader
			return 0, io.EOF
		}
		if t := binary.LittleEndian.Uint32(b); t == RecordCompressed || t == RecordCompressed2 {
			if s.data, err = s.payload(b, t, off); err != nil {
				s.err = err
				return 0, err
			}
			s.at = off
			continue
		}
		if err := s.each(b, off, false); err != nil {
			s.err = err
			return 0, err
		}
	}
	n := copy(p, s.data)
	s.data = s.data[n:]
	s.short = n < len(p)
	return n, nil
}

// decompress reads the rest of the data section from first, the
// COMPRESSED record at off, on: the compressed stream and the records
// between its pieces, handing every record to each.
func (f *File) decompress(w *walker, first []byte, off int64, each func(b []byte, off int64, decompressed bool) error) error {
	s := &stream{f: f, w: w, each: each, at: off}
	var err error
	if s.data, err = s.payload(first, binary.LittleEndian.Uint32(first), off); err != nil {
		return err
	}
	dec, err := zstd.NewReader(s, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxWindow), zstd.WithDecoderLowmem(true))
	if err != nil {
		return err
	}
	defer dec.Close()
	limit := uint64(max(f.dataEnd-f.dataOff, 1<<20)) * maxRatio
	var cost uint64
	buf := make([]byte, streamWindow)
	have := 0
	le := binary.LittleEndian
	for {
		n, rerr := dec.Read(buf[have:])
		have += n
		p := 0
		for have-p >= recordHeaderSize {
			size := int(le.Uint16(buf[p+6:]))
			if size < recordHeaderSize {
				return f.formatErr(s.at, "a record decompressed from here has size %d, smaller than a record header", size)
			}
			if size > have-p {
				break // it ends in what is decompressed next
			}
			if cost += uint64(size); cost > limit {
				return f.formatErr(s.at, "the compressed records expand past %d bytes (%d times the data section): the records from here on are not read", limit, maxRatio)
			}
			if err := each(buf[p:p+size:p+size], s.at, true); err != nil {
				return err
			}
			p += size
		}
		have = copy(buf, buf[p:have])
		if rerr == nil {
			continue
		}
		if s.err != nil {
			return s.err
		}
		if rerr == io.EOF || errors.Is(rerr, io.ErrUnexpectedEOF) && s.atBoundary {
			break
		}
		return f.formatErr(s.at, "decompressing the records (perf record -z): %v", rerr)
	}
	if have > 0 {
		return f.formatErr(w.off, "the compressed records end inside a record (%d bytes of it)", have)
	}
	return w.end()
}
