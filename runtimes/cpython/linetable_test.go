package cpython

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestLineMatchesPython: for every code object of a few standard modules
// (thousands of location tables), Line gives each code unit the line
// Python's own co_positions() gives it, on each interpreter here; so does
// the index the reader decodes a table into once.
func TestLineMatchesPython(t *testing.T) {
	ran := 0
	for _, py := range []string{"/usr/bin/python3.11", "/root/.pyenv/versions/3.12.1/bin/python3.12", "/root/.pyenv/versions/3.13.0/bin/python3.13"} {
		if _, err := os.Stat(py); err != nil {
			t.Logf("skipping %s: %v", py, err)
			continue
		}
		out, err := exec.Command(py, "testdata/lines.py").Output()
		if err != nil {
			t.Fatalf("%s testdata/lines.py: %v", py, err)
		}
		codes, units := 0, 0
		sc := bufio.NewScanner(bytes.NewReader(out))
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var rec [3]json.RawMessage
			var first int
			var table string
			var lines []int
			if json.Unmarshal(sc.Bytes(), &rec) != nil || json.Unmarshal(rec[0], &first) != nil ||
				json.Unmarshal(rec[1], &table) != nil || json.Unmarshal(rec[2], &lines) != nil {
				t.Fatalf("%s: bad line %q", py, sc.Text())
			}
			lt, _ := hex.DecodeString(table)
			x := newLineIndex(lt, first)
			for u, want := range lines {
				if got := Line(lt, first, u); got != want {
					t.Fatalf("%s: table %s (first line %d), unit %d: line %d, Python says %d", py, table, first, u, got, want)
				}
				if got := x.line(u); got != want {
					t.Fatalf("%s: table %s (first line %d), unit %d: the index says line %d, Python %d", py, table, first, u, got, want)
				}
			}
			codes++
			units += len(lines)
		}
		if codes < 100 {
			t.Fatalf("%s: only %d code objects", py, codes)
		}
		t.Logf("%s: %d code objects, %d code units agree", py, codes, units)
		ran++
	}
	if ran == 0 {
		t.Skip("no CPython 3.11+ here")
	}
}

// FuzzLine: any table, first line and index give an answer without
// panicking, and an index past the table's units is -1.
func FuzzLine(f *testing.F) {
	f.Add([]byte{0x80 | 11<<3, 1, 2, 0x80 | 14<<3 | 3, 3, 2, 5, 7}, 10, 1)
	f.Add([]byte{0xf8, 0x80 | 13<<3, 0x7f, 0x7f, 0x7f, 0x3f}, 1, 1)
	f.Add([]byte{}, 0, -1)
	f.Fuzz(func(t *testing.T, table []byte, first, unit int) {
		Line(table, first, unit)
		total := 0
		for _, b := range table {
			if b&128 != 0 || total == 0 {
				total += int(b&7) + 1
			}
		}
		if unit >= total && unit >= 0 && Line(table, first, unit) != -1 {
			t.Fatalf("unit %d past %d units has line %d", unit, total, Line(table, first, unit))
		}
	})
}

// TestRuntimeSection: an object without a _PyRuntime symbol (stripped)
// has it found by its .PyRuntime section, as CPython 3.12+ places it.
func TestRuntimeSection(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skipf("no gcc: %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "rt.c")
	os.WriteFile(src, []byte(`__attribute__((section(".PyRuntime"), used)) static char rt[64] = "xdebugpy";
int main(void) { return rt[0]; }
`), 0o644)
	exe := filepath.Join(dir, "rt")
	if out, err := exec.Command("gcc", "-s", "-o", exe, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	addr, ok := runtimeSymbol(f)
	sec := f.Section(".PyRuntime")
	if !ok || sec == nil || addr != sec.Addr {
		t.Fatalf("runtimeSymbol: %#x %v, want the section's address", addr, ok)
	}
	if syms, _ := f.Symbols(); len(syms) != 0 {
		t.Fatalf("the object still has %d symbols", len(syms))
	}
}
