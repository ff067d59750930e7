package sframe_test

import (
	"encoding/binary"
	"path/filepath"
	"testing"

	"github.com/rewindstack/rewind/cfi"
	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/internal/testutil/fuzzcorpus"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/sframe"
)

// genFuzzSeeds are the .eh_frame sections of the committed fixture
// libraries (PLT expression, signal frame, DRAP, RA in a register, an
// undefined RA, AArch64 with pointer authentication), with their
// addresses.
func genFuzzSeeds(tb testing.TB) map[string]struct {
	data []byte
	addr uint64
	arm  bool
} {
	out := map[string]struct {
		data []byte
		addr uint64
		arm  bool
	}{}
	for _, p := range []string{"testdata/v3/libspecial-x86_64.so", "testdata/v3/libfuncs-x86_64.so", "testdata/v3/libfuncs-aarch64.so"} {
		f, err := elfobj.Open(p)
		if err != nil {
			tb.Fatal(err)
		}
		out[filepath.Base(p)] = struct {
			data []byte
			addr uint64
			arm  bool
		}{f.EhFrame.Data, f.EhFrame.Addr, f.Arch == regs.ARM64}
		f.Close()
	}
	return out
}

// TestWriteGenFuzzCorpus regenerates testdata/fuzz/FuzzGenerate when
// REWIND_WRITE_CORPUS=1.
func TestWriteGenFuzzCorpus(t *testing.T) {
	write := fuzzcorpus.Regenerate(t, "FuzzGenerate")
	for name, s := range genFuzzSeeds(t) {
		for _, v := range []uint8{2, 3} {
			write("seed-"+name+"-v"+string(rune('0'+v)), s.data, s.addr, uint16(v), s.arm)
		}
	}
}

// FuzzGenerate compiles arbitrary .eh_frame bytes: the generator never
// panics, Encode writes exactly Size bytes, and what it writes parses, is
// sorted, and every FDE's first PC looks up.
func FuzzGenerate(f *testing.F) {
	for _, s := range genFuzzSeeds(f) {
		f.Add(s.data, s.addr, uint16(2), s.arm)
		f.Add(s.data, s.addr, uint16(3), s.arm)
	}
	f.Fuzz(func(t *testing.T, data []byte, addr uint64, version uint16, arm bool) {
		arch := regs.AMD64
		if arm {
			arch = regs.ARM64
		}
		sec := &cfi.Section{Name: "fuzz .eh_frame", Kind: cfi.EhFrame, Data: data, Addr: addr,
			ByteOrder: binary.LittleEndian, PtrSize: 8}
		g, err := sframe.GenerateCFI(arch, binary.LittleEndian, sframe.GenOptions{Version: uint8(version % 4)}, sec)
		if err != nil {
			return
		}
		out, err := g.Encode(addr + 0x10000)
		if err != nil {
			return // a function too far from the section for 32 bits
		}
		if len(out) != g.Size() {
			t.Fatalf("Encode wrote %d bytes, Size says %d", len(out), g.Size())
		}
		s, err := sframe.Parse(out, addr+0x10000, "generated")
		if err != nil {
			t.Fatalf("generated section does not parse: %v", err)
		}
		if s.NumFDEs() != g.Stats.FDEs {
			t.Fatalf("%d FDEs parsed, %d generated", s.NumFDEs(), g.Stats.FDEs)
		}
		for i := range s.FDEs() {
			fde := s.FDE(i)
			if i > 0 && fde.Start < s.FDE(i-1).End() {
				t.Fatalf("FDE %d at %#x overlaps or precedes the one before", i, fde.Start)
			}
			if fde.Size > 0 {
				if _, ok := s.Lookup(fde.Start); !ok {
					t.Fatalf("no row at the start of FDE %d (%#x)", i, fde.Start)
				}
			}
		}
	})
}
