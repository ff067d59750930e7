// Package readat holds the one read helper the file parsers share.
package readat

import "io"

// Full fills p from r at offset off. A short read is io.ErrUnexpectedEOF,
// as is an offset beyond what io.ReaderAt can address.
func Full(r io.ReaderAt, p []byte, off uint64) error {
	if len(p) == 0 {
		return nil
	}
	if off > 1<<63-1 {
		return io.ErrUnexpectedEOF
	}
	n, err := r.ReadAt(p, int64(off))
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}
