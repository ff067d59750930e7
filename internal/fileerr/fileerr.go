// Package fileerr holds the one error type every file parser of rewind
// returns for malformed input (cfi, sframe, perfdata, elfobj, corefile
// re-export it as their FormatError), so that every such error says the
// same things in the same order: which package, which file, which section
// or record, at which byte offset, and what is wrong.
package fileerr

import (
	"fmt"
	"strings"
)

// FormatError reports malformed data in a file.
type FormatError struct {
	// Pkg is the package that found the problem ("cfi", "sframe",
	// "perfdata", "elfobj", "corefile").
	Pkg string
	// File names the file; "" when the data did not come from a file
	// (a ring buffer, a buffer in memory) or the file is not known where
	// the error is made (a caller wraps the error with the path then).
	File string
	// Section names the section, segment, note or record the problem is
	// in ("" for the file as a whole).
	Section string
	// Offset is the byte offset of the problem: from the start of
	// Section when Section is set, else from the start of the file.
	Offset uint64
	// Msg says what is wrong.
	Msg string
	// Err is the underlying error, if any (io.ErrUnexpectedEOF for data
	// cut short, say); errors.Is and errors.As see it.
	Err error
}

// Error formats the error as "PKG: FILE: SECTION+0xOFF: MSG: ERR", or
// with "offset 0xOFF" when there is no section, leaving out what is not
// known.
func (e *FormatError) Error() string {
	var b strings.Builder
	if e.Pkg != "" {
		b.WriteString(e.Pkg)
		b.WriteString(": ")
	}
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
	if e.Section != "" {
		fmt.Fprintf(&b, "%s+%#x", e.Section, e.Offset)
	} else {
		fmt.Fprintf(&b, "offset %#x", e.Offset)
	}
	if e.Msg != "" {
		b.WriteString(": ")
		b.WriteString(e.Msg)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns Err.
func (e *FormatError) Unwrap() error { return e.Err }
