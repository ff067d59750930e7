package elfobj

import (
	"bytes"
	"os"
	"testing"
)

// TestMapSections: sections and symbols read from mapped ranges are the
// bytes read by copying (this test binary's own, which are large enough
// to be mapped).
func TestMapSections(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Skipf("no executable path: %v", err)
	}
	open := func(mapped bool) *File {
		MapSections(mapped)
		defer MapSections(false)
		f, err := Open(exe)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		if _, err := f.Text.Load(); err != nil {
			t.Fatal(err)
		}
		if err := f.LoadSymbols(); err != nil {
			t.Fatal(err)
		}
		return f
	}
	copied, mapped := open(false), open(true)
	for _, p := range [][2]*Section{{copied.EhFrame, mapped.EhFrame}, {copied.EhFrameHdr, mapped.EhFrameHdr}, {copied.Text, mapped.Text}} {
		if (p[0] == nil) != (p[1] == nil) || p[0] != nil && !bytes.Equal(p[0].Data, p[1].Data) {
			t.Errorf("section %v differs when mapped", p[0])
		}
	}
	if len(mapped.Text.Data) < mapMin {
		t.Errorf(".text is %d bytes: nothing was mapped", len(mapped.Text.Data))
	}
	for _, addr := range []uint64{mapped.Text.Addr, mapped.Text.Addr + mapped.Text.Size/2} {
		n1, o1, ok1 := copied.Symbolize(addr)
		n2, o2, ok2 := mapped.Symbolize(addr)
		if n1 != n2 || o1 != o2 || ok1 != ok2 {
			t.Errorf("%#x: %s+%#x %v copied, %s+%#x %v mapped", addr, n1, o1, ok1, n2, o2, ok2)
		}
	}
}
