package perfmap

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestParse reads lines as Node and the JVM write them, and what a hostile
// process could: junk, a line too long, a size of 0, an overflow, code
// moved to an address another entry held (the last line for a start
// wins) and entries that overlap (one ends where the next begins).
func TestParse(t *testing.T) {
	long := "7f0000002000 10 " + strings.Repeat("x", MaxLine+10)
	in := strings.Join([]string{
		"7f0000000000 40 JS:*jsHot /app.js:2:15",
		"7f0000000100 20 double Spin.hot(int)",
		"garbage",
		"zz 10 bad start",
		"7f0000000200 0 empty",
		"ffffffffffffff00 1000 overflows",
		long,
		"7f0000000100 30 LazyCompile:~jsMid /app.js:5:1", // replaces Spin.hot
		"7f0000000110 8 inner",                           // cuts jsMid at 0x110
		"0x7f0000000300 0x10 with 0x prefixes",
		"",
	}, "\n")
	m, err := Parse(strings.NewReader(in), 0)
	if err != nil {
		t.Fatal(err)
	}
	if m.Skipped != 5 || m.Truncated || m.Len() != 4 {
		t.Errorf("skipped %d, truncated %v, %d symbols; want 5, false, 4", m.Skipped, m.Truncated, m.Len())
	}
	for _, c := range []struct {
		pc   uint64
		want string
	}{
		{0x7f0000000000, "JS:*jsHot /app.js:2:15"},
		{0x7f000000003f, "JS:*jsHot /app.js:2:15"},
		{0x7f0000000040, ""},
		{0x7f0000000100, "LazyCompile:~jsMid /app.js:5:1"},
		{0x7f0000000110, "inner"},
		{0x7f0000000118, ""}, // inner ends, and jsMid was cut at its start
		{0x7f0000000305, "with 0x prefixes"},
		{0x10, ""},
	} {
		s, ok := m.Lookup(c.pc)
		if ok != (c.want != "") || s.Name != c.want {
			t.Errorf("Lookup(%#x) = %q, %v; want %q", c.pc, s.Name, ok, c.want)
		}
	}
	// Bounded: only the first limit bytes are read.
	var b strings.Builder
	for i := 0; i < 1000; i++ {
		fmt.Fprintf(&b, "%x 10 f%d\n", 0x1000+i*0x10, i)
	}
	m, err = Parse(strings.NewReader(b.String()), 100)
	if err != nil || !m.Truncated || m.Len() == 0 || m.Len() > 10 {
		t.Fatalf("limit 100: %v, truncated %v, %d symbols", err, m != nil && m.Truncated, m.Len())
	}
}

// TestOpenRefuses: a map owned by another user than the process's (or
// root) is refused, as perf refuses it, and so is one that is not a
// regular file; a missing map is os.ErrNotExist.
func TestOpenRefuses(t *testing.T) {
	pid := os.Getpid()
	path := Path(pid)
	if _, err := Open(pid); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("no map: %v, want not exist", err)
	}
	real := fmt.Sprintf("/tmp/perf-%d.map", pid)
	if err := os.WriteFile(real, []byte("1000 10 f\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(real)
	m, err := Open(pid)
	if err != nil || m.Len() != 1 {
		t.Fatalf("own map: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("changing the map's owner needs root")
	}
	if err := os.Chown(real, 12345, 12345); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(pid); !errors.Is(err, ErrNotOwned) {
		t.Errorf("map of uid 12345 for a process of uid %d: %v, want refused", os.Geteuid(), err)
	}
	os.Remove(real)
	if err := syscall.Mkfifo(real, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(pid); err == nil {
		t.Errorf("%s is a FIFO: opened", path)
	}
}

// FuzzParse: any bytes parse without a panic into symbols that do not
// overlap and are sorted.
func FuzzParse(f *testing.F) {
	f.Add([]byte("7f0000000000 40 JS:*jsHot /app.js:2:15\n7f0000000010 8 x\n"))
	f.Add([]byte("0x10 0x10 a\n\x00\xff 1 2\n10 10 b\r\n10 5 c"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(strings.NewReader(string(b)), 1<<16)
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range m.syms {
			if s.End <= s.Start || i > 0 && m.syms[i-1].End > s.Start {
				t.Fatalf("symbol %d %+v after %+v", i, s, m.syms[max(i-1, 0)])
			}
		}
	})
}
