// Package elfdata reads the contents of ELF sections from untrusted files:
// bounded in size, decompressed, and with debug/elf's panics turned into
// errors. The symbolizer's DWARF and the Go runtime's pcln table both read
// their sections through it.
package elfdata

import (
	"bytes"
	"compress/zlib"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/rewindstack/rewind/internal/fsafe"
)

// MaxSection bounds the (decompressed) size of a section rewind loads.
const MaxSection = 1 << 30

// Section returns a section's contents, decompressed (SHF_COMPRESSED
// zlib or zstd, or a legacy .zdebug section's "ZLIB" header and zlib
// stream), refusing implausible sizes; a panic in debug/elf becomes an
// error.
func Section(s *elf.Section) (data []byte, err error) {
	if s.Size > MaxSection || s.Flags&elf.SHF_COMPRESSED != 0 && s.Size/2048 > s.FileSize {
		return nil, fmt.Errorf("section %s: implausible size %d", s.Name, s.Size)
	}
	err = Protect(func() error {
		var err error
		data, err = s.Data()
		return err
	})
	if err != nil || !strings.HasPrefix(s.Name, ".zdebug") {
		return data, err
	}
	if len(data) < 12 || string(data[:4]) != "ZLIB" {
		return data, nil // stored uncompressed
	}
	size := binary.BigEndian.Uint64(data[4:12])
	if size > MaxSection || size/2048 > uint64(len(data)) {
		return nil, fmt.Errorf("section %s: implausible size %d", s.Name, size)
	}
	zr, err := zlib.NewReader(bytes.NewReader(data[12:]))
	if err != nil {
		return nil, fmt.Errorf("section %s: %v", s.Name, err)
	}
	out := make([]byte, 0, min(size, 1<<20))
	buf := bytes.NewBuffer(out)
	if _, err := io.Copy(buf, io.LimitReader(zr, int64(size))); err != nil {
		return nil, fmt.Errorf("section %s: %v", s.Name, err)
	}
	return buf.Bytes(), nil
}

// Protect runs fn, turning a panic into an error: debug/elf and debug/dwarf
// panic on some malformed input, which must never end a rewind command.
func Protect(fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("malformed debug information (panic: %v)", p)
		}
	}()
	return fn()
}

// File is a file opened with debug/elf for reading sections.
type File struct {
	ELF *elf.File
	// OS is the open file, for readers that map or read it directly.
	OS *os.File
}

// Close closes the file.
func (h *File) Close() { h.OS.Close() }

// Open opens path with debug/elf (through fsafe, a panic in debug/elf
// becomes an error).
func Open(path string) (*File, error) {
	f, _, err := fsafe.Open(path)
	if err != nil {
		return nil, err
	}
	var ef *elf.File
	err = Protect(func() error {
		var err error
		ef, err = elf.NewFile(f)
		return err
	})
	if err != nil {
		f.Close()
		return nil, err
	}
	return &File{ELF: ef, OS: f}, nil
}

// CString returns the NUL-terminated string at off in b (a string
// table's entry); false when off is outside b or the string unended.
func CString(b []byte, off int64) (string, bool) {
	if off < 0 || off >= int64(len(b)) {
		return "", false
	}
	s := b[off:]
	if n := bytes.IndexByte(s, 0); n >= 0 {
		return string(s[:n]), true
	}
	return "", false
}
