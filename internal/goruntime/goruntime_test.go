package goruntime

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fuzzcorpus"
)

const prog = `package main

import "fmt"

func main() { fmt.Println("hi") }
`

func build(t *testing.T, flags ...string) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("no go command: %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module p\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "p")
	cmd := exec.Command("go", append(append([]string{"build", "-o", exe}, flags...), ".")...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return exe
}

// TestTableMatchesDWARF checks the offset table of the machine's Go
// release against the DWARF of a binary it builds, and that the stripped
// build of the same program finds the same layout through the table and
// the pcln table.
func TestTableMatchesDWARF(t *testing.T) {
	full, err := Open(build(t))
	if err != nil {
		t.Fatal(err)
	}
	if full.Source != "dwarf" {
		t.Fatalf("layout from %s, want dwarf", full.Source)
	}
	tab, err := ForVersion(full.GoVersion)
	if err != nil {
		t.Fatalf("the machine's Go: %v", err)
	}
	if tab.G != full.G || tab.M.G0 != full.M.G0 || tab.M.ProcID != full.M.ProcID || tab.M.CurG != full.M.CurG {
		t.Errorf("table %s:\n%+v %+v\nDWARF:\n%+v %+v", tab.Source, tab.G, tab.M, full.G, full.M)
	}
	if !reflect.DeepEqual(tab.WaitReasons, full.WaitReasons) {
		t.Errorf("wait reasons differ:\ntable %q\nbinary %q", tab.WaitReasons, full.WaitReasons)
	}
	stripped, err := Open(build(t, "-ldflags=-s -w"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(stripped.Source, "table ") || stripped.AllGs == 0 || stripped.G != full.G {
		t.Errorf("stripped: %+v", stripped)
	}
}

// TestUnsupportedVersion: a version without a table is refused by name.
func TestUnsupportedVersion(t *testing.T) {
	_, err := ForVersion("go1.21.13")
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "go1.21.13") || !strings.Contains(err.Error(), "go1.22") {
		t.Errorf("go1.21.13: %v", err)
	}
	for v, want := range map[string]string{"go1.26.8": "go1.26", "go1.27rc1": "go1.27", "go1.22": "go1.22", "devel +abc": "", "go2": ""} {
		if got := majorMinor(v); got != want {
			t.Errorf("majorMinor(%q) = %q, want %q", v, got, want)
		}
	}
}

// TestRipLoads decodes the forEachG pattern.
func TestRipLoads(t *testing.T) {
	// MOVQ 0x11a2d4(IP), CX; MOVQ 0x11a2d0(IP), DX at 0x449fa5 (go1.26).
	code := []byte{0x48, 0x8b, 0x0d, 0xd4, 0xa2, 0x11, 0x00, 0x48, 0x89, 0x4c, 0x24, 0x18, 0x48, 0x8b, 0x15, 0xd0, 0xa2, 0x11, 0x00}
	got := ripLoads(code, 0x449fa5)
	if len(got) != 2 || got[0] != 0x564280 || got[1] != 0x564288 {
		t.Errorf("ripLoads = %#x", got)
	}
}

// FuzzRead: arbitrary files never panic, hang or exhaust memory.
func FuzzRead(f *testing.F) {
	f.Add([]byte("\x7fELF\x02\x01\x01\x00"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = Read(bytes.NewReader(data), "fuzz")
		_ = ripLoads(data, 0x400000)
	})
}

// TestWriteCorpus regenerates FuzzRead's committed seeds: the ELF and
// program headers of a real Go binary, truncated.
func TestWriteCorpus(t *testing.T) {
	write := fuzzcorpus.Regenerate(t, "FuzzRead")
	data, err := os.ReadFile(build(t, "-ldflags=-s -w"))
	if err != nil {
		t.Fatal(err)
	}
	write("go-headers", data[:min(len(data), 4096)])
	write("empty", []byte{})
}

// TestNotGo: a C program is refused as such.
func TestNotGo(t *testing.T) {
	_, err := Open("/bin/sh")
	if err == nil || !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "not a Go program") {
		t.Errorf("/bin/sh: %v", err)
	}
}
