// Package zstd is a pure-Go Zstandard (RFC 8878) decompressor.
//
// It exists to read the PERF_RECORD_COMPRESSED records of `perf record -z`
// files without cgo or third-party modules. perf drives libzstd's streaming
// API (ZSTD_compressStream plus ZSTD_flushStream): the whole recording is one
// long frame that is never ended, and its compressed bytes are cut into
// records at arbitrary points, so a block can straddle two records. Decoder
// therefore accepts input in chunks of any size, keeps an incomplete block
// until the rest arrives, and keeps the last window of output as match
// history across calls. DecodeAll handles whole buffers.
//
// Everything libzstd emits without a dictionary is supported: all frame
// header forms, skippable and concatenated frames, raw, RLE and compressed
// blocks, raw, RLE, Huffman and treeless literals (one or four streams,
// FSE-compressed or direct Huffman weights), predefined, RLE, FSE and repeat
// sequence tables, repeat offsets, and XXH64 content checksums. Frames that
// name a dictionary are refused with ErrDictionary.
//
// Hostile input is expected: every length is checked against the bytes
// present and against Block_Maximum_Size, the declared window is capped by
// the caller, and memory grows only with output actually produced.
// Decoder.LimitOutput caps the total output, since RLE blocks let a few
// bytes of input demand 128 KiB of output each.
//
// Verified against the zstd 1.5.4 CLI (levels 1-19, --long, with and without
// checksums) and against real `perf record -z` files.
package zstd

import (
	"errors"
	"fmt"
)

// DefaultMaxWindow is the window limit DecodeAll uses: 64 MiB, four times
// what `zstd --long` picks by default and far above what perf uses.
const DefaultMaxWindow = 64 << 20

// Sentinel errors; a decoding error wraps one of them or a plain description
// in an *Error that also tells where in the input it was found.
var (
	// ErrDictionary reports a frame that needs a dictionary.
	ErrDictionary = errors.New("dictionaries not supported")
	// ErrWindowTooLarge reports a frame whose window exceeds the limit
	// given to NewDecoder.
	ErrWindowTooLarge = errors.New("window size exceeds limit")
	// ErrChecksum reports a frame whose content checksum does not match.
	ErrChecksum = errors.New("content checksum mismatch")
	// ErrTruncated reports input that ends inside a frame header, block,
	// checksum or skippable frame (and, for DecodeAll, inside any frame).
	ErrTruncated = errors.New("unexpected end of input")
	// ErrOutputLimit reports output beyond the Decoder's LimitOutput.
	ErrOutputLimit = errors.New("output exceeds limit")
)

// Error is a decoding error: Err says what is wrong and Offset is the
// position in the compressed input (counting every byte fed to the Decoder)
// of the frame header, block or field where it was found.
type Error struct {
	Offset int64
	Err    error
}

// Error formats the error as "zstd: <what> at input offset N".
func (e *Error) Error() string {
	return fmt.Sprintf("zstd: %v at input offset %d", e.Err, e.Offset)
}

// Unwrap returns the underlying error, so errors.Is works with the sentinels.
func (e *Error) Unwrap() error { return e.Err }

// corrupt is the error for malformed input detected inside a unit.
func corrupt(msg string) error { return errors.New(msg) }

// DecodeAll decompresses src, a sequence of complete Zstandard and
// skippable frames, appends the result to dst and returns it. Windows above
// DefaultMaxWindow are refused. Unlike a Decoder, DecodeAll treats input
// that stops before the last frame's final block as truncated.
func DecodeAll(dst, src []byte) ([]byte, error) {
	d := NewDecoder(DefaultMaxWindow)
	dst, err := d.Decode(dst, src)
	if err != nil {
		return dst, err
	}
	if err := d.Close(); err != nil {
		return dst, err
	}
	if d.state != stMagic {
		return dst, &Error{Offset: d.pos, Err: fmt.Errorf("%w: frame not ended", ErrTruncated)}
	}
	return dst, nil
}
