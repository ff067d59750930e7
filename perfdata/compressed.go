package perfdata

import (
	"encoding/binary"
	"fmt"

	"github.com/rewindstack/rewind/internal/zstd"
)

// perf record -z compresses what it reads from the kernel's ring buffers
// with Zstandard and writes it as COMPRESSED records (COMPRESSED2 in newer
// perf: the same with the compressed size given and the record padded to
// 8 bytes). The compressed bytes of all of them are one stream: each record
// continues where the last one stopped, and the records it decompresses to
// may begin in one and end in the next.

// maxWindow bounds the history a compressed stream may ask to be kept:
// perf compresses with libzstd's defaults (a few MiB at its levels).
const maxWindow = 128 << 20

// maxRatio bounds what the compressed records decompress to, as a
// multiple of the data section's size: perf's level 1 makes 10-20x of
// --call-graph dwarf samples, and a crafted stream could make far more.
const maxRatio = 256

// compressed is the state of a file's compressed stream.
type compressed struct {
	dec *zstd.Decoder
	// rest is the start of a record the last decompressed bytes ended
	// inside of.
	rest []byte
}

func newCompressed(dataSize int64) *compressed {
	dec := zstd.NewDecoder(maxWindow)
	dec.LimitOutput(uint64(max(dataSize, 1<<20)) * maxRatio)
	return &compressed{dec: dec}
}

// records decompresses the compressed record b (of type typ, at off in
// file f) and calls each for every record now complete, returning each's
// errors as they are. The bytes the records are in are new for every
// call, and never reused: records may keep pointing into them.
func (z *compressed) records(f *File, off int64, b []byte, typ uint32, each func(rec []byte) error) error {
	bad := func(format string, args ...any) error {
		return &FormatError{Pkg: "perfdata", File: f.Path, Offset: uint64(off), Msg: fmt.Sprintf(format, args...)}
	}
	le := binary.LittleEndian
	data := b[recordHeaderSize:]
	if typ == RecordCompressed2 {
		if len(data) < 8 {
			return bad("COMPRESSED2 record of %d bytes has no data size", len(b))
		}
		n := le.Uint64(data)
		data = data[8:]
		if n > uint64(len(data)) {
			return bad("COMPRESSED2 record says %d bytes of data in %d", n, len(data))
		}
		data = data[:n]
	}
	buf := make([]byte, len(z.rest), len(z.rest)+8*len(data)+4096)
	copy(buf, z.rest)
	out, err := z.dec.Decode(buf, data)
	if err != nil {
		return bad("decompressing the records (perf record -z): %v", err)
	}
	p := 0
	for len(out)-p >= recordHeaderSize {
		size := int(le.Uint16(out[p+6:]))
		if size < recordHeaderSize {
			return bad("a record decompressed from here has size %d, smaller than a record header", size)
		}
		if size > len(out)-p {
			break // it ends in the next compressed record
		}
		if err := each(out[p : p+size : p+size]); err != nil {
			return err
		}
		p += size
	}
	z.rest = out[p:]
	return nil
}
