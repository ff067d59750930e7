// Package perfmap reads the symbol maps that JIT compilers write for
// perf: /tmp/perf-PID.map, one line per piece of generated code,
// "START SIZE NAME" with START and SIZE in hexadecimal (Node's
// --perf-basic-prof, the JVM's Compiler.perfmap, Python 3.12's -X perf).
//
// A map is written by the process it describes, which may be hostile: a
// line that does not parse is skipped and counted (as perf skips it), a
// line longer than MaxLine is skipped, a file larger than MaxSize is read
// only up to it (Map.Truncated), and Open refuses a file that is not a
// regular file or not owned by the process's user or root, as perf
// refuses it. Entries may overlap (code moved or replaced): at one start
// address the last line wins, and an entry ends where the next begins.
package perfmap

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/rewindstack/rewind/internal/fsafe"
)

// Limits on what is read.
const (
	// MaxSize is the most of a map file read, in bytes.
	MaxSize = 256 << 20
	// MaxLine is the longest line taken, in bytes; longer ones are
	// skipped.
	MaxLine = 64 << 10
)

// Symbol is one entry: the code at [Start, End) is named Name.
type Symbol struct {
	Start, End uint64
	Name       string
}

// Map is a parsed perf map.
type Map struct {
	syms []Symbol // sorted by Start, not overlapping
	// Skipped counts the lines that did not parse or were too long.
	Skipped int
	// Truncated says the file was larger than MaxSize: what followed was
	// not read.
	Truncated bool
	// Size is the file's size when Open read it.
	Size int64
}

// Len is the number of symbols.
func (m *Map) Len() int { return len(m.syms) }

// Lookup returns the symbol whose code holds pc.
func (m *Map) Lookup(pc uint64) (Symbol, bool) {
	i := sort.Search(len(m.syms), func(i int) bool { return m.syms[i].Start > pc }) - 1
	if i < 0 || pc >= m.syms[i].End {
		return Symbol{}, false
	}
	return m.syms[i], true
}

// LookupJIT implements target.JITSymbols.
func (m *Map) LookupJIT(pc uint64) (string, uint64, bool) {
	s, ok := m.Lookup(pc)
	return s.Name, s.Start, ok
}

// Parse reads a map from r, at most limit bytes (MaxSize when limit <= 0).
func Parse(r io.Reader, limit int64) (*Map, error) {
	if limit <= 0 {
		limit = MaxSize
	}
	m := &Map{}
	var es []Symbol // in file order: the stable sort keeps it per start
	br := bufio.NewReaderSize(io.LimitReader(r, limit+1), 64<<10)
	var read int64
	for {
		b, n, long, err := readLine(br)
		read += int64(n)
		if read > limit {
			m.Truncated = true
			break
		}
		if long {
			m.Skipped++
		} else if len(b) > 0 {
			if s, ok := parseLine(b); ok {
				es = append(es, s)
			} else {
				m.Skipped++
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	sort.SliceStable(es, func(i, j int) bool { return es[i].Start < es[j].Start })
	for i, e := range es {
		if i+1 < len(es) && es[i+1].Start == e.Start {
			continue // a later line for the same start wins
		}
		if n := len(m.syms); n > 0 && m.syms[n-1].End > e.Start {
			m.syms[n-1].End = e.Start
		}
		m.syms = append(m.syms, e)
	}
	return m, nil
}

// readLine returns the next line without its newline and the bytes it
// took; an over-long line is returned empty (long) with those bytes
// counted. It returns io.EOF at the end.
func readLine(br *bufio.Reader) (line []byte, n int, long bool, err error) {
	b, err := br.ReadSlice('\n')
	n = len(b)
	for err == bufio.ErrBufferFull {
		long = true
		b, err = br.ReadSlice('\n')
		n += len(b)
	}
	if long || n > MaxLine {
		return nil, n, true, err
	}
	return bytes.TrimRight(b, "\r\n"), n, false, err
}

// parseLine parses "START SIZE NAME".
func parseLine(b []byte) (Symbol, bool) {
	s := string(b)
	a, rest, ok := strings.Cut(s, " ")
	if !ok {
		return Symbol{}, false
	}
	z, name, ok := strings.Cut(rest, " ")
	if !ok || name == "" {
		return Symbol{}, false
	}
	start, err1 := strconv.ParseUint(strings.TrimPrefix(a, "0x"), 16, 64)
	size, err2 := strconv.ParseUint(strings.TrimPrefix(z, "0x"), 16, 64)
	if err1 != nil || err2 != nil || size == 0 || start+size < start {
		return Symbol{}, false
	}
	return Symbol{Start: start, End: start + size, Name: name}, true
}

// ErrNotOwned is wrapped by Open's error for a map owned by neither the
// process's user nor root.
var ErrNotOwned = errors.New("not owned by the process's user or root")

// Path returns where process pid's map is, as seen from here: under the
// process's root directory (a container's /tmp), named by its PID in its
// own namespace (the last NSpid of /proc/PID/status).
func Path(pid int) string {
	nspid := pid
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[0] == "NSpid:" {
				if n, err := strconv.Atoi(f[len(f)-1]); err == nil {
					nspid = n
				}
			}
		}
	}
	return fmt.Sprintf("/proc/%d/root/tmp/perf-%d.map", pid, nspid)
}

// Open reads process pid's map (Path). It returns an error wrapping
// os.ErrNotExist when there is none. For a process that has exited (a
// recording's command, read when the profile is written) it reads
// /tmp/perf-PID.map, owned by root or by the user running this, as perf
// report does.
func Open(pid int) (*Map, error) {
	path, uid := where(pid)
	f, fi, err := fsafe.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if s, ok := fi.Sys().(*syscall.Stat_t); !ok || s.Uid != 0 && int(s.Uid) != uid {
		return nil, fmt.Errorf("perf map %s: %w", path, ErrNotOwned)
	}
	m, err := Parse(f, MaxSize)
	if err != nil {
		return nil, fmt.Errorf("perf map %s: %w", path, err)
	}
	m.Size = fi.Size()
	return m, nil
}

// Size returns the size of process pid's map as Open would find it: a
// map that grew (a JIT compiler appends as it compiles) is worth reading
// again.
func Size(pid int) (int64, error) {
	path, _ := where(pid)
	st, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// where returns the path Open reads for process pid and the user that
// may own it besides root.
func where(pid int) (string, int) {
	st, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	if err != nil {
		return fmt.Sprintf("/tmp/perf-%d.map", pid), os.Geteuid()
	}
	uid := -1
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		uid = int(s.Uid)
	}
	return Path(pid), uid
}
