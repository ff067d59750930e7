// Package procmaps reads /proc/PID/maps into target mappings: the one
// parser of that file, for live captures and for profiling.
package procmaps

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/rewindstack/rewind/target"
)

// DeletedSuffix is what the kernel appends to the path of a file that was
// unlinked or replaced after it was mapped (in maps and in /proc/PID/exe).
const DeletedSuffix = " (deleted)"

// Read reads and parses /proc/PID/maps.
func Read(pid int) ([]target.Mapping, error) {
	path := fmt.Sprintf("/proc/%d/maps", pid)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	maps, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return maps, nil
}

// Parse parses the text of a maps file, in its order (by address). Each line is
//
//	start-end perms offset major:minor inode [padding pathname]
//
// with the addresses and offset in hex and the inode in decimal. The
// pathname is everything after the padding that follows the inode, spaces
// included. The strings of the result share one copy of the text.
func Parse(b []byte) ([]target.Mapping, error) {
	text := string(b)
	n := 0
	for i := 0; i < len(text); i++ {
		if text[i] == '\n' {
			n++
		}
	}
	maps := make([]target.Mapping, 0, n+1)
	for len(text) > 0 {
		line := text
		if i := indexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = ""
		}
		if len(line) == 0 {
			continue
		}
		m, err := parseLine(line)
		if err != nil {
			return nil, err
		}
		maps = append(maps, m)
	}
	return maps, nil
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// parseLine parses one line of a maps file.
func parseLine(line string) (target.Mapping, error) {
	var m target.Mapping
	rest := line
	field := func() string {
		i := 0
		for i < len(rest) && rest[i] == ' ' {
			i++
		}
		j := i
		for j < len(rest) && rest[j] != ' ' {
			j++
		}
		f := rest[i:j]
		rest = rest[j:]
		return f
	}
	bad := func(what string) (target.Mapping, error) {
		return target.Mapping{}, fmt.Errorf("bad %s in maps line %q", what, line)
	}
	rng := field()
	dash := indexByte(rng, '-')
	if dash < 0 {
		return bad("address range")
	}
	var ok bool
	if m.Start, ok = parseHex(rng[:dash]); !ok {
		return bad("start address")
	}
	if m.End, ok = parseHex(rng[dash+1:]); !ok || m.End < m.Start {
		return bad("end address")
	}
	if m.Perms = field(); len(m.Perms) != 4 {
		return bad("permissions")
	}
	if m.Offset, ok = parseHex(field()); !ok {
		return bad("offset")
	}
	if m.Dev = field(); indexByte(m.Dev, ':') < 0 {
		return bad("device")
	}
	if m.Inode, ok = parseDec(field()); !ok {
		return bad("inode")
	}
	// One separator, then padding to align the column, then the path,
	// which may itself contain (but never starts with) spaces.
	for len(rest) > 0 && rest[0] == ' ' {
		rest = rest[1:]
	}
	if len(rest) > len(DeletedSuffix) && rest[0] == '/' && rest[len(rest)-len(DeletedSuffix):] == DeletedSuffix {
		rest = rest[:len(rest)-len(DeletedSuffix)]
		m.Deleted = true
	}
	m.Path = unescape(rest)
	return m, nil
}

// unescape decodes the one escape the kernel writes in a maps path: a
// newline in a file name is printed as "\012" (seq_path escapes only the
// line separator), so such a file can still be opened.
func unescape(p string) string {
	if !strings.Contains(p, `\012`) {
		return p
	}
	return strings.ReplaceAll(p, `\012`, "\n")
}

func parseHex(s string) (uint64, bool) {
	if len(s) == 0 || len(s) > 16 {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(c)
	}
	return v, true
}

func parseDec(s string) (uint64, bool) {
	if len(s) == 0 || len(s) > 20 {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// Range is a mapping's address range, for finding stack bounds during a
// capture's pause without parsing the rest of the maps text.
type Range struct{ Start, End uint64 }

// ScanRanges appends the address range of every line of a maps text to
// r, in order.
func ScanRanges(b []byte, r []Range) []Range {
	for len(b) > 0 {
		i := 0
		var start, end uint64
		for i < len(b) && b[i] != '-' && b[i] != '\n' {
			start = start<<4 | uint64(hexVal(b[i]))
			i++
		}
		if i < len(b) && b[i] == '-' {
			i++
		}
		for i < len(b) && b[i] != ' ' && b[i] != '\n' {
			end = end<<4 | uint64(hexVal(b[i]))
			i++
		}
		if end > start {
			r = append(r, Range{Start: start, End: end})
		}
		// The rest of the line, found with IndexByte (vectorised): a
		// process with thousands of fiber stacks has a megabyte of
		// maps, scanned inside the capture's pause.
		nl := bytes.IndexByte(b[i:], '\n')
		if nl < 0 {
			break
		}
		b = b[i+nl+1:]
	}
	return r
}

func hexVal(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10
	}
	return 0
}

// FindRange returns the range of sorted ranges r that contains addr.
func FindRange(r []Range, addr uint64) (Range, bool) {
	lo, hi := 0, len(r)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if r[m].End <= addr {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(r) && r[lo].Start <= addr {
		return r[lo], true
	}
	return Range{}, false
}

// Find returns the mapping of sorted maps that contains addr, or nil.
func Find(maps []target.Mapping, addr uint64) *target.Mapping {
	lo, hi := 0, len(maps)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if maps[m].End <= addr {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(maps) && maps[lo].Start <= addr && addr < maps[lo].End {
		return &maps[lo]
	}
	return nil
}
