package live

import "fmt"

const deletedSuffix = " (deleted)"

// ReadMaps reads and parses /proc/PID/maps.
func ReadMaps(pid int) ([]Mapping, error) {
	return readMapsFile(fmt.Sprintf("/proc/%d/maps", pid))
}

func readMapsFile(path string) ([]Mapping, error) {
	b, err := readFile(path, make([]byte, 0, 64<<10))
	if err != nil {
		return nil, err
	}
	maps, err := parseMaps(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return maps, nil
}

// parseMaps parses the text of a maps file. Each line is
//
//	start-end perms offset major:minor inode [padding pathname]
//
// with the addresses and offset in hex and the inode in decimal. The
// pathname is everything after the padding that follows the inode, spaces
// included. The strings of the result share one copy of the text.
func parseMaps(b []byte) ([]Mapping, error) {
	text := string(b)
	n := 0
	for i := 0; i < len(text); i++ {
		if text[i] == '\n' {
			n++
		}
	}
	maps := make([]Mapping, 0, n+1)
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
		m, err := parseMapsLine(line)
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

// parseMapsLine parses one line of a maps file.
func parseMapsLine(line string) (Mapping, error) {
	var m Mapping
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
	bad := func(what string) (Mapping, error) {
		return Mapping{}, fmt.Errorf("bad %s in maps line %q", what, line)
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
	if len(rest) > len(deletedSuffix) && rest[0] == '/' && rest[len(rest)-len(deletedSuffix):] == deletedSuffix {
		rest = rest[:len(rest)-len(deletedSuffix)]
		m.Deleted = true
	}
	m.Path = rest
	return m, nil
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

// mapRange is a mapping's address range, for finding stack bounds during
// the pause without parsing the rest of the maps text.
type mapRange struct{ start, end uint64 }

// scanRanges appends the address range of every line of a maps text to
// r, in order.
func scanRanges(b []byte, r []mapRange) []mapRange {
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
			r = append(r, mapRange{start, end})
		}
		for i < len(b) && b[i] != '\n' {
			i++
		}
		b = b[min(i+1, len(b)):]
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

// findRange returns the range of sorted ranges r that contains addr.
func findRange(r []mapRange, addr uint64) (mapRange, bool) {
	lo, hi := 0, len(r)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if r[m].end <= addr {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(r) && r[lo].start <= addr {
		return r[lo], true
	}
	return mapRange{}, false
}

// IsFile reports whether the mapping is of a file (its Path is absolute),
// as opposed to anonymous or special memory ([stack], [vdso], ...).
func (m *Mapping) IsFile() bool { return len(m.Path) > 0 && m.Path[0] == '/' }

// Executable reports whether the mapping is executable.
func (m *Mapping) Executable() bool { return len(m.Perms) > 2 && m.Perms[2] == 'x' }
