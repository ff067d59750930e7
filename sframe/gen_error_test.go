package sframe_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/sframe"
)

// TestGenerateErrorNamesFileOnce: a malformed .eh_frame gives an error
// naming the file, the section and the offset, each once (cfi's errors
// name the file already: Generate must not say it again).
func TestGenerateErrorNamesFileOnce(t *testing.T) {
	f, err := elfobj.Open("/bin/true")
	if err != nil {
		t.Skipf("/bin/true: %v", err)
	}
	if f.EhFrame == nil {
		f.Close()
		t.Skip("/bin/true has no .eh_frame")
	}
	off := f.EhFrame.Offset
	f.Close()
	b, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	// The first CIE's length: 0xffffffff announces a 64-bit length,
	// which then claims more than the section holds.
	for i := off; i < off+12; i++ {
		b[i] = 0xff
	}
	path := filepath.Join(t.TempDir(), "prog")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err = elfobj.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = sframe.Generate(f, sframe.GenOptions{})
	if err == nil {
		t.Fatal("no error for a corrupt .eh_frame")
	}
	if msg := err.Error(); strings.Count(msg, path) != 1 || !strings.Contains(msg, ".eh_frame+0x") {
		t.Errorf("error %q: want the file once, the section and the offset", msg)
	}
}
