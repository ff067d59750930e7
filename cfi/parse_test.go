package cfi

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ehSection returns an .eh_frame Section over b at address addr.
func ehSection(b []byte, addr uint64) *Section {
	return &Section{Name: "test .eh_frame", Kind: EhFrame, Data: b, Addr: addr, ByteOrder: binary.LittleEndian, PtrSize: 8}
}

func dbgSection(b []byte) *Section {
	return &Section{Name: "test .debug_frame", Kind: DebugFrame, Data: b, ByteOrder: binary.LittleEndian, PtrSize: 8}
}

// stdInitial is the usual amd64 CIE program: CFA = rsp+8, RA at CFA-8.
var stdInitial = []byte{0x0c, 7, 8, 0x90, 1}

// ehCIE appends a version-1 "zR" CIE (FDE encoding enc) with the amd64
// initial program and returns its offset.
func (a *asm) ehCIE(enc byte) int {
	body := newAsm().u32(0).u8(1).str("zR").uleb(1).sleb(-8).u8(16).uleb(1).u8(enc)
	body.u8(stdInitial...)
	return a.entry(false, 8, body.b)
}

// ehFDE appends an FDE for cie with pcrel|sdata4 addresses covering
// [start, start+size) and the given instructions. addr is the section's
// address.
func (a *asm) ehFDE(addr uint64, cie int, start uint64, size uint32, ins []byte) int {
	off := len(a.b)
	body := newAsm().u32(uint32(off + 4 - cie))
	field := addr + uint64(off) + 8
	body.u32(uint32(start - field)).u32(size).uleb(0).u8(ins...)
	return a.entry(false, 8, body.b)
}

func collectRows(t *testing.T, f *FDE) []Row {
	t.Helper()
	var rows []Row
	if err := f.Rows(func(r *Row) error { rows = append(rows, *r); return nil }); err != nil {
		t.Fatalf("Rows: %v", err)
	}
	return rows
}

func TestParseSimpleEhFrame(t *testing.T) {
	const addr = 0x40000
	a := newAsm()
	cie := a.ehCIE(0x1b)
	a.ehFDE(addr, cie, 0x1000, 0x20, []byte{0x41, 0x0e, 16, 0x86, 2})
	a.ehFDE(addr, cie, 0x1020, 0x10, nil)
	a.ehFDE(addr, cie, 0x1030, 0, nil) // empty: dropped
	a.u32(0)                           // terminator
	a.u8(0xde, 0xad)                   // not read
	fdes, err := Parse(ehSection(a.b, addr))
	if err != nil {
		t.Fatal(err)
	}
	if len(fdes) != 2 {
		t.Fatalf("got %d FDEs, want 2", len(fdes))
	}
	if fdes[0].CIE != fdes[1].CIE {
		t.Errorf("CIE not shared")
	}
	c := fdes[0].CIE
	if c.Augmentation != "zR" || c.Version != 1 || c.CodeAlign != 1 || c.DataAlign != -8 || c.RAReg != 16 ||
		c.FDEEncoding != 0x1b || c.LSDAEncoding != PEOmit || c.AddressSize != 8 {
		t.Errorf("CIE = %+v", c)
	}
	if fdes[0].Start != 0x1000 || fdes[0].End != 0x1020 || fdes[1].Start != 0x1020 || fdes[1].End != 0x1030 {
		t.Errorf("ranges [%#x,%#x) [%#x,%#x)", fdes[0].Start, fdes[0].End, fdes[1].Start, fdes[1].End)
	}
	rows := collectRows(t, fdes[0])
	if len(rows) != 2 || rows[0].End != 0x1001 || rows[1].Start != 0x1001 || rows[1].End != 0x1020 {
		t.Fatalf("rows %+v", rows)
	}
	if !eqCFA(rows[0].CFA, CFARule{Kind: CFARegOffset, Reg: 7, Offset: 8}) || rows[1].CFA.Offset != 16 {
		t.Errorf("CFA %+v %+v", rows[0].CFA, rows[1].CFA)
	}
	if !eqRule(rows[1].Regs[6], Rule{Kind: RuleOffset, Offset: -16}) || !eqRule(rows[1].Regs[16], Rule{Kind: RuleOffset, Offset: -8}) {
		t.Errorf("regs %+v", rows[1].Regs)
	}
	// A FDE with no instructions has the CIE's row.
	rows = collectRows(t, fdes[1])
	if len(rows) != 1 || rows[0].Start != 0x1020 || rows[0].End != 0x1030 || rows[0].CFA.Offset != 8 {
		t.Errorf("rows %+v", rows)
	}
}

func TestParse64BitLength(t *testing.T) {
	// .debug_frame in the 64-bit DWARF format: 8-byte CIE id and CIE
	// pointer; a version 4 CIE with 4-byte addresses and a 2-byte
	// segment selector; plus a 32-bit CIE/FDE pair and a zero
	// terminator (skipped in .debug_frame).
	a := newAsm()
	cie64 := a.entry(true, 8, newAsm().u64(^uint64(0)).u8(4).str("").u8(4, 2).uleb(4).sleb(-4).uleb(14).u8(0x0c, 13, 0).b)
	a.u32(0)
	cie32 := a.entry(false, 4, newAsm().u32(0xffffffff).u8(3).str("").uleb(1).sleb(-8).uleb(300).u8(stdInitial...).b)
	a.entry(true, 8, newAsm().u64(uint64(cie64)).u16(0x55).u32(0x8000).u32(0x100).u8(0x42).b)
	a.entry(false, 4, newAsm().u32(uint32(cie32)).u64(0x9000).u64(0x10).b)
	fdes, err := Parse(dbgSection(a.b))
	if err != nil {
		t.Fatal(err)
	}
	if len(fdes) != 2 {
		t.Fatalf("got %d FDEs", len(fdes))
	}
	c := fdes[0].CIE
	if c.Version != 4 || c.AddressSize != 4 || c.SegmentSize != 2 || c.CodeAlign != 4 || c.DataAlign != -4 || c.RAReg != 14 {
		t.Errorf("CIE = %+v", c)
	}
	if fdes[0].Start != 0x8000 || fdes[0].End != 0x8100 {
		t.Errorf("FDE 0 [%#x,%#x)", fdes[0].Start, fdes[0].End)
	}
	rows := collectRows(t, fdes[0])
	if len(rows) != 2 || rows[0].End != 0x8008 || rows[0].CFA.Reg != 13 {
		t.Errorf("rows %+v", rows)
	}
	c = fdes[1].CIE
	if c.Version != 3 || c.RAReg != 300 || fdes[1].Start != 0x9000 || fdes[1].End != 0x9010 {
		t.Errorf("CIE = %+v, FDE [%#x,%#x)", c, fdes[1].Start, fdes[1].End)
	}

	// .eh_frame entries with a 64-bit length keep 4-byte ids.
	b := newAsm()
	cie := b.entry(true, 8, newAsm().u32(0).u8(1).str("zR").uleb(1).sleb(-8).u8(16).uleb(1).u8(0x03).u8(stdInitial...).b)
	off := len(b.b)
	b.entry(true, 8, newAsm().u32(uint32(off+12-cie)).u32(0x2000).u32(0x30).uleb(0).b)
	fdes, err = Parse(ehSection(b.b, 0))
	if err != nil {
		t.Fatal(err)
	}
	if len(fdes) != 1 || fdes[0].Start != 0x2000 || fdes[0].End != 0x2030 {
		t.Errorf("FDEs %+v", fdes)
	}
}

func TestCIEVersion1RAByte(t *testing.T) {
	// Version 1 stores the RA column in one byte; 0x90 must not be
	// read as the start of a ULEB128.
	a := newAsm()
	cie := a.entry(false, 4, newAsm().u32(0xffffffff).u8(1).str("").uleb(4).sleb(-4).u8(0x90).u8(0x0c, 1, 0).b)
	a.entry(false, 4, newAsm().u32(uint32(cie)).u64(0x100).u64(0x8).b)
	fdes, err := Parse(dbgSection(a.b))
	if err != nil {
		t.Fatal(err)
	}
	if fdes[0].CIE.RAReg != 0x90 || len(fdes[0].CIE.Initial) != 3 {
		t.Errorf("CIE %+v", fdes[0].CIE)
	}
}

func TestAugmentations(t *testing.T) {
	const addr = 0x10000
	a := newAsm()
	// "zPLRS": personality indirect|pcrel|sdata4, LSDA pcrel|sdata4,
	// FDE pcrel|sdata4, signal frame.
	body := newAsm().u32(0).u8(1).str("zPLRS").uleb(1).sleb(-8).u8(16)
	persField := addr + 4 + 4 + 1 + 6 + 3 + 1 + 1 // id, version, "zPLRS\0", align x2 + ra, aug len, P enc
	body.uleb(7).u8(0x9b).u32(uint32(0x5000-persField)).u8(0x1b, 0x1b).u8(stdInitial...)
	cie := a.entry(false, 8, body.b)
	off := len(a.b)
	fb := newAsm().u32(uint32(off + 4 - cie))
	fb.u32(uint32(0x3000 - (addr + uint64(off) + 8))).u32(0x40)
	lsdaField := addr + uint64(off) + 17
	fb.uleb(4).u32(uint32(0x7000 - lsdaField))
	a.entry(false, 8, fb.b)
	fdes, err := Parse(ehSection(a.b, addr))
	if err != nil {
		t.Fatal(err)
	}
	f := fdes[0]
	c := f.CIE
	if c.Personality != 0x5000 || c.PersonalityEncoding != 0x9b || c.LSDAEncoding != 0x1b || c.FDEEncoding != 0x1b || !c.SignalFrame {
		t.Errorf("CIE %+v", c)
	}
	if f.Start != 0x3000 || f.End != 0x3040 || f.LSDA != 0x7000 || len(f.Instructions) != 3 {
		t.Errorf("FDE %+v", f)
	}

	// Old GCC "eh": a pointer-sized eh_ptr follows the string; no
	// augmentation data in the FDE.
	a = newAsm()
	cie = a.entry(false, 8, newAsm().u32(0).u8(1).str("eh").u64(0xdeadbeef).uleb(1).sleb(-8).u8(16).u8(stdInitial...).b)
	off = len(a.b)
	a.entry(false, 8, newAsm().u32(uint32(off+4-cie)).u64(0x4000).u64(0x10).u8(0x41).b)
	fdes, err = Parse(ehSection(a.b, 0))
	if err != nil {
		t.Fatal(err)
	}
	if fdes[0].Start != 0x4000 || fdes[0].End != 0x4010 || len(fdes[0].Instructions) < 1 || fdes[0].Instructions[0] != 0x41 {
		t.Errorf("eh FDE %+v", fdes[0])
	}
	if rows := collectRows(t, fdes[0]); len(rows) != 2 {
		t.Errorf("eh rows %+v", rows)
	}

	// "B", "G" and trailing unknown letters are skipped thanks to 'z';
	// an unknown letter before a data letter, or without 'z', is an
	// error.
	for _, tc := range []struct {
		aug  string
		data []byte
		ok   bool
	}{
		{"zRB", []byte{0x03}, true},
		{"zRG", []byte{0x03}, true},
		{"zRBG", []byte{0x03}, true},
		{"zRX", []byte{0x03, 0x77}, true},
		{"zXR", []byte{0x77, 0x03}, false},
		{"X", nil, false},
		{"zL", []byte{0x03}, true},
	} {
		a := newAsm()
		cb := newAsm().u32(0).u8(1).str(tc.aug).uleb(1).sleb(-8).u8(16)
		cb.uleb(uint64(len(tc.data))).u8(tc.data...).u8(stdInitial...)
		if !strings.HasPrefix(tc.aug, "z") {
			cb = newAsm().u32(0).u8(1).str(tc.aug).uleb(1).sleb(-8).u8(16).u8(stdInitial...)
		}
		cie := a.entry(false, 8, cb.b)
		off := len(a.b)
		fb := newAsm().u32(uint32(off + 4 - cie))
		if strings.Contains(tc.aug, "R") {
			fb.u32(0x6000).u32(0x10).uleb(0)
		} else {
			fb.u64(0x6000).u64(0x10).uleb(4).u32(0x1234)
		}
		a.entry(false, 8, fb.b)
		fdes, err := Parse(ehSection(a.b, 0))
		if tc.ok != (err == nil) {
			t.Errorf("%q: err = %v", tc.aug, err)
			continue
		}
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) || fe.Section != "test .eh_frame" || fe.Offset != 9 {
				t.Errorf("%q: error %#v", tc.aug, err)
			}
			continue
		}
		if len(fdes) != 1 || fdes[0].Start != 0x6000 || fdes[0].End != 0x6010 {
			t.Errorf("%q: FDEs %+v", tc.aug, fdes)
		}
		if tc.aug == "zL" && (fdes[0].LSDA != 0x1234 || fdes[0].CIE.LSDAEncoding != 3) {
			t.Errorf("zL: LSDA %#x", fdes[0].LSDA)
		}
	}
}

func TestZeroTerminator(t *testing.T) {
	a := newAsm()
	cie := a.ehCIE(0x03)
	a.entry(false, 4, newAsm().u32(uint32(len(a.b)+4-cie)).u32(0x100).u32(0x10).uleb(0).b)
	a.u32(0)
	a.u32(0x999) // garbage after the terminator is never read
	fdes, err := Parse(ehSection(a.b, 0))
	if err != nil || len(fdes) != 1 {
		t.Fatalf("eh_frame: %d FDEs, %v", len(fdes), err)
	}

	// In .debug_frame zero lengths are skipped.
	a = newAsm()
	a.u32(0)
	cie = a.entry(false, 4, newAsm().u32(0xffffffff).u8(1).str("").uleb(1).sleb(-8).u8(16).u8(stdInitial...).b)
	a.u32(0).u32(0)
	a.entry(false, 4, newAsm().u32(uint32(cie)).u64(0x100).u64(0x10).b)
	a.u32(0)
	a.u8(0, 0, 0) // padding too short for a length
	fdes, err = Parse(dbgSection(a.b))
	if err != nil || len(fdes) != 1 || fdes[0].Start != 0x100 {
		t.Fatalf("debug_frame: %+v, %v", fdes, err)
	}
}

func TestParseErrors(t *testing.T) {
	cieBytes := func() *asm {
		a := newAsm()
		a.ehCIE(0x03)
		return a
	}
	for _, tc := range []struct {
		name string
		sec  func() *Section
		off  uint64
		msg  string
	}{
		{"length past end", func() *Section {
			a := cieBytes()
			a.u32(0x999999).u32(0x20).u32(0)
			return ehSection(a.b, 0)
		}, 0x18, "FDE length 0x999999 runs past end of section"},
		{"truncated length", func() *Section {
			a := cieBytes()
			a.u8(1, 2)
			return ehSection(a.b, 0)
		}, 0x18, "truncated entry length"},
		{"reserved length", func() *Section {
			a := cieBytes()
			a.u32(0xfffffff3)
			return ehSection(a.b, 0)
		}, 0x18, "reserved initial length"},
		{"bad version", func() *Section {
			a := newAsm()
			a.entry(false, 4, newAsm().u32(0).u8(2).str("").uleb(1).sleb(-8).u8(16).b)
			return ehSection(a.b, 0)
		}, 8, "unsupported CIE version 2"},
		{"cie pointer before start", func() *Section {
			a := cieBytes()
			a.entry(false, 4, newAsm().u32(0x1000).u32(0).u32(0).uleb(0).b)
			return ehSection(a.b, 0)
		}, 0x1c, "points before start of section"},
		{"cie pointer to fde", func() *Section {
			a := cieBytes()
			a.entry(false, 4, newAsm().u32(0x1c-0x0).u32(0).u32(4).uleb(0).b)
			a.entry(false, 4, newAsm().u32(0x30-0x18).u32(0).u32(4).uleb(0).b)
			return ehSection(a.b, 0)
		}, 0x30, "does not point to a CIE"},
		{"debug cie pointer outside", func() *Section {
			a := newAsm()
			a.entry(false, 4, newAsm().u32(0x5000).u64(0).u64(4).b)
			return dbgSection(a.b)
		}, 4, "outside section"},
		{"unterminated augmentation", func() *Section {
			a := newAsm()
			a.entry(false, 4, newAsm().u32(0).u8(1).u8('z', 'R', 'R').b)
			return ehSection(a.b, 0)
		}, 9, "unterminated"},
		{"augmentation data overrun", func() *Section {
			a := newAsm()
			a.entry(false, 4, newAsm().u32(0).u8(1).str("zR").uleb(1).sleb(-8).u8(16).uleb(100).b)
			return ehSection(a.b, 0)
		}, 15, "augmentation data runs past end"},
		{"bad fde encoding", func() *Section {
			a := newAsm()
			cie := a.ehCIE(0x07)
			a.entry(false, 4, newAsm().u32(uint32(len(a.b)+4-cie)).u32(0).u32(4).uleb(0).b)
			return ehSection(a.b, 0)
		}, 0x20, "unknown pointer encoding 0x7"},
		{"truncated fde address", func() *Section {
			a := newAsm()
			cie := a.ehCIE(0x04)
			a.entry(false, 4, newAsm().u32(uint32(len(a.b)+4-cie)).u32(0).b)
			return ehSection(a.b, 0)
		}, 0x20, "truncated pointer"},
		{"bad address size", func() *Section {
			a := newAsm()
			a.entry(false, 4, newAsm().u32(0xffffffff).u8(4).str("").u8(3, 0).uleb(1).sleb(-8).u8(16).b)
			return dbgSection(a.b)
		}, 10, "unsupported CIE address size 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.sec())
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v, want *FormatError", err)
			}
			if fe.Offset != tc.off || !strings.Contains(fe.Msg, tc.msg) || !strings.HasPrefix(fe.Section, "test .") {
				t.Errorf("err = %v, want offset %#x and %q", err, tc.off, tc.msg)
			}
			if !strings.HasPrefix(err.Error(), "cfi: test .") {
				t.Errorf("Error() = %q", err.Error())
			}
		})
	}
	// The example from the package's specification.
	a := cieBytes()
	a.u32(0x999999).u32(0x20)
	a.b = append(a.b, make([]byte, 0x1a4-len(a.b))...)
	a.u32(0x999999).u32(0x20)
	s := ehSection(a.b, 0)
	s.Name = "/usr/lib/libc.so.6 .eh_frame"
	if _, err := FDEAt(s, 0x1a4); err == nil || err.Error() != "cfi: /usr/lib/libc.so.6 .eh_frame+0x1a4: FDE length 0x999999 runs past end of section" {
		t.Errorf("err = %v", err)
	}
	// Partial results come back with the error.
	a = cieBytes()
	a.entry(false, 4, newAsm().u32(uint32(len(a.b)+4)).u32(0x100).u32(4).uleb(0).b)
	a.u32(0x999999)
	fdes, err := Parse(ehSection(a.b, 0))
	if err == nil || len(fdes) != 1 {
		t.Errorf("partial: %d FDEs, %v", len(fdes), err)
	}
	// Bad Section fields.
	for _, s := range []*Section{nil, {PtrSize: 2, ByteOrder: binary.LittleEndian}, {PtrSize: 8}, {PtrSize: 8, ByteOrder: binary.LittleEndian, Kind: 7}} {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%+v) succeeded", s)
		}
	}
}

func TestTombstones(t *testing.T) {
	// Discarded functions leave FDEs at address 0 or all ones (lld's
	// tombstone), whose range wraps. They cover nothing: dropped.
	a := newAsm()
	cie := a.entry(false, 4, newAsm().u32(0xffffffff).u8(3).str("").uleb(1).sleb(-8).uleb(16).u8(stdInitial...).b)
	a.entry(false, 4, newAsm().u32(uint32(cie)).u64(^uint64(0)).u64(0x40).b)
	a.entry(false, 4, newAsm().u32(uint32(cie)).u64(0x1000).u64(0).b)
	a.entry(false, 4, newAsm().u32(uint32(cie)).u64(0x2000).u64(0x10).b)
	fdes, err := Parse(dbgSection(a.b))
	if err != nil || len(fdes) != 1 || fdes[0].Start != 0x2000 {
		t.Fatalf("%+v %v", fdes, err)
	}
}

func TestFDEAt(t *testing.T) {
	a := newAsm()
	cie := a.ehCIE(0x1b)
	f1 := a.ehFDE(0x1000, cie, 0x5000, 0x10, []byte{0x41, 0x0e, 16})
	f2 := a.ehFDE(0x1000, cie, 0x5010, 0x10, nil)
	sec := ehSection(a.b, 0x1000)
	for _, off := range []int{f1, f2} {
		f, err := FDEAt(sec, uint64(off))
		if err != nil {
			t.Fatal(err)
		}
		if f.Offset != uint64(off) || f.CIE.Offset != uint64(cie) {
			t.Errorf("FDE %+v", f)
		}
	}
	for _, off := range []uint64{uint64(cie), 3, uint64(len(a.b)), 1 << 40} {
		if _, err := FDEAt(sec, off); err == nil {
			t.Errorf("FDEAt(%#x) succeeded", off)
		}
	}
}

// TestSignalFrameLibc checks that libc's signal trampoline CIE ("zRS") is
// recognised.
func TestSignalFrameLibc(t *testing.T) {
	sec := mustSection(t, libcPath, ".eh_frame")
	fdes, err := Parse(sec)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range fdes {
		if f.CIE.SignalFrame {
			n++
			if f.CIE.Augmentation != "zRS" {
				t.Errorf("signal frame CIE %q", f.CIE.Augmentation)
			}
		}
	}
	if n == 0 {
		t.Errorf("no signal frame FDE in libc")
	}
}

// TestReadelfMoreLibraries compares other system libraries and a Go
// binary's .debug_frame (Go's linker writes version 3 CIEs and
// DW_CFA_def_cfa_offset_sf) with readelf.
func TestReadelfMoreLibraries(t *testing.T) {
	paths := []string{
		"/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
		"/usr/lib/x86_64-linux-gnu/libgcc_s.so.1",
		"/lib64/ld-linux-x86-64.so.2",
		"/usr/lib/x86_64-linux-gnu/libm.so.6",
	}
	if !testing.Short() {
		if gobin, err := goBinary(t); err == nil {
			paths = append(paths, gobin)
		} else {
			t.Logf("no Go binary: %v", err)
		}
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			t.Logf("skipping %s: %v", p, err)
			continue
		}
		re := readelfFrames(t, p)
		for _, name := range []string{".eh_frame", ".debug_frame"} {
			sec, ok := elfSection(t, p, name)
			if !ok {
				continue
			}
			nf, nr := compareWithReadelf(t, sec, re[name])
			t.Logf("%s %s: %d FDEs, %d rows agree", filepath.Base(p), name, nf, nr)
		}
	}
}
