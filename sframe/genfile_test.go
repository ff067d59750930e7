package sframe_test

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/sframe"
)

// TestGenerateFile writes a fixture's section both ways: alone, encoded
// for the address given, and added to a copy that keeps the input's mode;
// each must parse back as the section generated.
func TestGenerateFile(t *testing.T) {
	in := "testdata/gen/input-x86_64.so" // (the generator's input: no .sframe yet)
	dir := t.TempDir()
	var seen *sframe.Generated
	sep := filepath.Join(dir, "sec")
	g, err := sframe.GenerateFile(in, sep, sframe.GenFileOptions{Version: 2, Separate: true, Addr: 0x1000,
		Generated: func(f *elfobj.File, g *sframe.Generated) { seen = g }})
	if err != nil {
		t.Fatal(err)
	}
	if seen != g.Generated || g.Addr != 0x1000 || g.CFIBytes == 0 {
		t.Errorf("Generated hook saw %p, result %p; Addr %#x, CFIBytes %d", seen, g.Generated, g.Addr, g.CFIBytes)
	}
	b, err := os.ReadFile(sep)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := g.EncodeChecked(0x1000); !bytes.Equal(b, want) {
		t.Errorf("the separate section is not the encoding for 0x1000")
	}
	if _, err := sframe.Parse(b, 0x1000, "sec"); err != nil {
		t.Errorf("separate section: %v", err)
	}
	cp := filepath.Join(dir, "copy.so")
	g2, err := sframe.GenerateFile(in, cp, sframe.GenFileOptions{Version: 2})
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(cp)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sec, err := sframe.FromELF(f, cp, ".sframe", true)
	if err != nil {
		t.Fatal(err)
	}
	if sec == nil || g2.Size() == 0 {
		t.Fatalf("no .sframe in the copy (generated %d bytes)", g2.Size())
	}
	st, _ := os.Stat(in)
	st2, _ := os.Stat(cp)
	if want := st.Mode().Perm() &^ umask(); st2.Mode().Perm() != want {
		t.Errorf("copy's mode %v, want %v", st2.Mode().Perm(), want)
	}
}

// umask returns the process's file mode creation mask.
func umask() os.FileMode {
	m := syscall.Umask(0)
	syscall.Umask(m)
	return os.FileMode(m)
}
