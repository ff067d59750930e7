//go:build !linux

package symbolize

import "io"

// bigBuffer returns a zeroed buffer of n bytes.
func bigBuffer(n uint64) []byte { return make([]byte, n) }

// fileMap is a mapping of part of a file (none is made here).
type fileMap struct{ data []byte }

// mapFile returns nil: sections are read.
func mapFile(r io.ReaderAt, off, n int64) *fileMap { return nil }

func (m *fileMap) release() {}
