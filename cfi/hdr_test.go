package cfi

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

func TestReadEncodedPointer(t *testing.T) {
	le, be := binary.LittleEndian, binary.BigEndian
	type tc struct {
		name     string
		ptr      int
		order    binary.ByteOrder
		enc      uint8
		data     []byte // placed at offset 4 of a section at 0x10000
		funcBase uint64
		want     uint64
		next     uint64
		indirect bool
	}
	u64 := func(v uint64) []byte { return le.AppendUint64(nil, v) }
	u32 := func(v uint32) []byte { return le.AppendUint32(nil, v) }
	for _, c := range []tc{
		{"absptr", 8, le, PEAbsptr, u64(0x1122334455667788), 0, 0x1122334455667788, 12, false},
		{"absptr4", 4, le, PEAbsptr, u32(0x11223344), 0, 0x11223344, 8, false},
		{"uleb128", 8, le, PEULEB128, []byte{0xe5, 0x8e, 0x26}, 0, 624485, 7, false},
		{"udata2", 8, le, PEUdata2, []byte{0x34, 0x12}, 0, 0x1234, 6, false},
		{"udata4", 8, le, PEUdata4, u32(0x89abcdef), 0, 0x89abcdef, 8, false},
		{"udata8", 8, le, PEUdata8, u64(0xfedcba9876543210), 0, 0xfedcba9876543210, 12, false},
		{"signed", 8, le, PESigned, u64(^uint64(1)), 0, ^uint64(1), 12, false},
		{"signed4", 4, le, PESigned, u32(0xfffffffe), 0, 0xfffffffe, 8, false},
		{"sleb128", 8, le, PESLEB128, []byte{0x7f}, 0, ^uint64(0), 5, false},
		{"sleb128 big", 8, le, PESLEB128, []byte{0x80, 0x7f}, 0, uint64(1<<64 - 128), 6, false},
		{"sdata2", 8, le, PESdata2, []byte{0xfe, 0xff}, 0, ^uint64(1), 6, false},
		{"sdata4", 8, le, PESdata4, u32(0xfffffff0), 0, ^uint64(15), 8, false},
		{"sdata8", 8, le, PESdata8, u64(^uint64(7)), 0, ^uint64(7), 12, false},
		{"pcrel sdata4", 8, le, PEPCRel | PESdata4, u32(0xfffffffc), 0, 0x10000, 8, false},
		{"pcrel sdata4 ptr4 wraps", 4, le, PEPCRel | PESdata4, u32(0xfffe0000), 0, 0xffff0004, 8, false},
		{"textrel udata4", 8, le, PETextRel | PEUdata4, u32(0x10), 0, 0x20010, 8, false},
		{"datarel sdata4", 8, le, PEDataRel | PESdata4, u32(0xfffffff0), 0, 0x2fff0, 8, false},
		{"funcrel udata2", 8, le, PEFuncRel | PEUdata2, []byte{0x10, 0}, 0x5000, 0x5010, 6, false},
		{"aligned", 8, le, PEAligned, append([]byte{9, 9, 9, 9}, u64(0xabc)...), 0, 0xabc, 16, false},
		{"aligned ptr4", 4, le, PEAligned, u32(0xabc), 0, 0xabc, 8, false},
		{"indirect pcrel sdata4", 8, le, PEIndirect | PEPCRel | PESdata4, u32(0x100), 0, 0x10104, 8, true},
		{"big-endian udata4", 8, be, PEUdata4, []byte{0x12, 0x34, 0x56, 0x78}, 0, 0x12345678, 8, false},
		{"big-endian sdata2", 8, be, PESdata2, []byte{0xff, 0xfe}, 0, ^uint64(1), 6, false},
		{"omit", 8, le, PEOmit, []byte{1, 2, 3}, 0, 0, 4, false},
	} {
		data := append([]byte{0, 0, 0, 0}, c.data...)
		sec := &Section{Name: "enc", Data: data, Addr: 0x10000, ByteOrder: c.order, PtrSize: c.ptr, TextAddr: 0x20000, DataAddr: 0x30000}
		v, next, ind, err := ReadEncodedPointer(sec, 4, c.enc, c.funcBase)
		if err != nil || v != c.want || next != c.next || ind != c.indirect {
			t.Errorf("%s: got %#x next %d indirect %v err %v; want %#x next %d indirect %v",
				c.name, v, next, ind, err, c.want, c.next, c.indirect)
		}
	}
	// Errors.
	for _, c := range []struct {
		name string
		enc  uint8
		data []byte
		off  uint64
		msg  string
	}{
		{"format 5", 0x05, []byte{1, 2, 3, 4}, 0, "unknown pointer encoding 0x5"},
		{"format 0xd", 0x0d, []byte{1, 2, 3, 4}, 0, "unknown pointer encoding"},
		{"application 0x60", 0x63, []byte{1, 2, 3, 4}, 0, "unknown pointer encoding 0x63"},
		{"application 0x70", 0x73, []byte{1, 2, 3, 4}, 0, "unknown pointer encoding"},
		{"truncated udata4", PEUdata4, []byte{1, 2, 3}, 0, "truncated pointer"},
		{"truncated uleb", PEULEB128, []byte{0x80, 0x80}, 0, "truncated pointer"},
		{"truncated aligned", PEAligned, []byte{1, 2, 3}, 1, "truncated aligned pointer"},
		{"past end", PEUdata4, []byte{1}, 2, "past end"},
	} {
		sec := &Section{Name: "enc", Data: c.data, ByteOrder: le, PtrSize: 8}
		_, _, _, err := ReadEncodedPointer(sec, c.off, c.enc, 0)
		var fe *FormatError
		if !errors.As(err, &fe) || fe.Offset != c.off || !strings.Contains(fe.Msg, c.msg) {
			t.Errorf("%s: err = %v, want %q at %d", c.name, err, c.msg, c.off)
		}
	}
	if _, _, _, err := ReadEncodedPointer(&Section{Data: []byte{1}}, 0, 0, 0); err == nil {
		t.Errorf("bad section: no error")
	}
}

// checkHdr checks every FDE of the binary's .eh_frame against the
// .eh_frame_hdr table: Lookup of its first and last address finds it,
// FDEAt decodes the same FDE, and addresses in gaps between FDEs find no
// covering FDE.
func checkHdr(t *testing.T, path string) {
	eh := mustSection(t, path, ".eh_frame")
	hs := mustSection(t, path, ".eh_frame_hdr")
	h, err := ParseEhFrameHdr(hs.Data, hs.Addr, hs.ByteOrder, hs.Name)
	if err != nil {
		t.Fatal(err)
	}
	if h.Version != 1 || h.EhFramePtr != eh.Addr || h.TableEnc != PEDataRel|PESdata4 {
		t.Errorf("header %+v, .eh_frame at %#x", h, eh.Addr)
	}
	fdes, err := Parse(eh)
	if err != nil {
		t.Fatal(err)
	}
	if h.FDECount != len(fdes) {
		t.Errorf("FDECount %d, Parse found %d", h.FDECount, len(fdes))
	}
	for i := 1; i < h.FDECount; i++ {
		p0, _ := h.Entry(i - 1)
		p1, _ := h.Entry(i)
		if p1 < p0 {
			t.Fatalf("table not sorted at %d", i)
		}
	}
	covered := func(pc uint64) bool {
		addr, ok := h.Lookup(pc)
		if !ok {
			return false
		}
		f, err := FDEAt(eh, addr-eh.Addr)
		if err != nil {
			t.Fatalf("FDEAt(%#x): %v", addr-eh.Addr, err)
		}
		return pc >= f.Start && pc < f.End
	}
	lowest := ^uint64(0)
	for _, f := range fdes {
		lowest = min(lowest, f.Start)
		for _, pc := range []uint64{f.Start, (f.Start + f.End) / 2, f.End - 1} {
			addr, ok := h.Lookup(pc)
			if !ok || addr != eh.Addr+f.Offset {
				t.Fatalf("Lookup(%#x) = %#x %v, want FDE at %#x", pc, addr, ok, eh.Addr+f.Offset)
			}
		}
		g, err := FDEAt(eh, f.Offset)
		if err != nil {
			t.Fatal(err)
		}
		if g.Start != f.Start || g.End != f.End || g.CIE.Offset != f.CIE.Offset || string(g.Instructions) != string(f.Instructions) || g.LSDA != f.LSDA {
			t.Fatalf("FDEAt(%#x) = %+v, Parse %+v", f.Offset, g, f)
		}
	}
	// Gaps: an address just past an FDE not covered by any FDE.
	gaps := 0
	for _, f := range fdes {
		pc := f.End
		inside := false
		for _, g := range fdes {
			if pc >= g.Start && pc < g.End {
				inside = true
				break
			}
		}
		if !inside {
			gaps++
			if covered(pc) {
				t.Errorf("gap %#x after FDE %#x reported as covered", pc, f.Offset)
			}
		}
	}
	if _, ok := h.Lookup(lowest - 1); ok {
		t.Errorf("Lookup below the first FDE succeeded")
	}
	t.Logf("%s: %d FDEs, %d gaps checked", path, len(fdes), gaps)
}

func TestEhFrameHdrGCC(t *testing.T) {
	exe := buildC(t, t.TempDir(), "p", "-O2", "-fexceptions")
	checkHdr(t, exe)
}

func TestEhFrameHdrLibc(t *testing.T) {
	checkHdr(t, libcPath)
}

func TestEhFrameHdrEncodings(t *testing.T) {
	const addr = 0x8000
	le := binary.LittleEndian
	type ent struct{ pc, fde uint64 }
	ents := []ent{{0x1000, 0x9000}, {0x1100, 0x9020}, {0x1200, 0x9040}}
	build := func(tableEnc uint8, field func(a *asm, v uint64)) []byte {
		a := newAsm().u8(1, PEPCRel|PESdata4, PEUdata4, tableEnc)
		a.u32(uint32(0x9000 - (addr + 4))).u32(uint32(len(ents)))
		for _, e := range ents {
			field(a, e.pc)
			field(a, e.fde)
		}
		return a.b
	}
	for _, c := range []struct {
		name string
		enc  uint8
		put  func(a *asm, v uint64)
	}{
		{"datarel sdata4", PEDataRel | PESdata4, func(a *asm, v uint64) { a.u32(uint32(v - addr)) }},
		{"udata4", PEUdata4, func(a *asm, v uint64) { a.u32(uint32(v)) }},
		{"udata8", PEUdata8, func(a *asm, v uint64) { a.u64(v) }},
		{"absptr", PEAbsptr, func(a *asm, v uint64) { a.u64(v) }},
		{"udata2", PEUdata2, func(a *asm, v uint64) { a.u16(uint16(v)) }},
		{"pcrel sdata4", PEPCRel | PESdata4, func(a *asm, v uint64) { a.u32(uint32(v - (addr + uint64(len(a.b))))) }},
		{"datarel sdata8", PEDataRel | PESdata8, func(a *asm, v uint64) { a.u64(v - addr) }},
	} {
		h, err := ParseEhFrameHdr(build(c.enc, c.put), addr, le, "hdr")
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if h.EhFramePtr != 0x9000 || h.FDECount != 3 {
			t.Errorf("%s: %+v", c.name, h)
		}
		for _, q := range []struct {
			pc   uint64
			want uint64
			ok   bool
		}{{0xfff, 0, false}, {0x1000, 0x9000, true}, {0x10ff, 0x9000, true}, {0x1100, 0x9020, true}, {0x1234, 0x9040, true}, {^uint64(0), 0x9040, true}} {
			got, ok := h.Lookup(q.pc)
			if got != q.want || ok != q.ok {
				t.Errorf("%s: Lookup(%#x) = %#x %v, want %#x %v", c.name, q.pc, got, ok, q.want, q.ok)
			}
		}
	}
	// No table.
	h, err := ParseEhFrameHdr([]byte{1, PEUdata4, PEOmit, PEOmit, 0, 0x90, 0, 0}, addr, le, "hdr")
	if err != nil || h.FDECount != 0 || h.EhFramePtr != 0x9000 {
		t.Errorf("no table: %+v %v", h, err)
	}
	if _, ok := h.Lookup(0x1000); ok {
		t.Errorf("Lookup without table succeeded")
	}
	// Errors.
	good := build(PEDataRel|PESdata4, func(a *asm, v uint64) { a.u32(uint32(v - addr)) })
	for _, c := range []struct {
		name string
		data []byte
		msg  string
	}{
		{"short", []byte{1, 0x1b}, "too short"},
		{"version", append([]byte{2}, good[1:]...), "unsupported version 2"},
		{"uleb table", append([]byte{1, 0x1b, 0x03, 0x01}, good[4:]...), "not searchable"},
		{"indirect table", append([]byte{1, 0x1b, 0x03, 0x83}, good[4:]...), "unsupported table encoding"},
		{"funcrel table", append([]byte{1, 0x1b, 0x03, 0x43}, good[4:]...), "unsupported table encoding"},
		{"count too big", append(append([]byte{}, good[:8]...), append([]byte{4, 0, 0, 0}, good[12:]...)...), "table of 4 entries runs past end"},
		{"huge count", append(append([]byte{}, good[:8]...), append([]byte{0xff, 0xff, 0xff, 0xff}, good[12:]...)...), "runs past end"},
		{"truncated eh_frame_ptr", []byte{1, 0x1b, 3, 0x3b, 0}, "eh_frame_ptr: truncated"},
		{"omitted eh_frame_ptr", []byte{1, 0xff, 3, 0x3b}, "no eh_frame_ptr"},
		{"truncated count", []byte{1, 0x1b, 3, 0x3b, 0, 0, 0, 0, 1}, "fde_count: truncated"},
	} {
		_, err := ParseEhFrameHdr(c.data, addr, le, "x .eh_frame_hdr")
		var fe *FormatError
		if !errors.As(err, &fe) || !strings.Contains(fe.Msg, c.msg) || fe.Section != "x .eh_frame_hdr" {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.msg)
		}
	}
	if _, err := ParseEhFrameHdr(good, addr, nil, "x"); err == nil {
		t.Errorf("nil byte order: no error")
	}
}
