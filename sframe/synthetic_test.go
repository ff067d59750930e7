package sframe_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/sframe"
)

// builder assembles SFrame sections by hand, in either byte order.
type builder struct {
	bo      binary.ByteOrder
	version uint8
	flags   uint8
	abi     sframe.ABI
	fixFP   int8
	fixRA   int8
	fdes    []fdeSpec
}

type fdeSpec struct {
	start   int64 // encoded start field (section- or field-relative)
	size    uint32
	info    uint8 // FRE type | PC type | pauth | signal
	info2   uint8
	repSize uint8
	fres    []freSpec
}

type freSpec struct {
	start uint32
	info  uint8 // base | N<<1 | size<<5 | mangled<<7
	words []int32
}

func freInfo(sp bool, n, sizeCode int, mangled bool) uint8 {
	i := uint8(n<<1) | uint8(sizeCode<<5)
	if sp {
		i |= 1
	}
	if mangled {
		i |= 0x80
	}
	return i
}

func (b *builder) bytes() []byte {
	var fres, fdes bytes.Buffer
	put := func(w *bytes.Buffer, size int, v uint64) {
		var t [8]byte
		switch size {
		case 1:
			t[0] = byte(v)
		case 2:
			b.bo.PutUint16(t[:], uint16(v))
		case 4:
			b.bo.PutUint32(t[:], uint32(v))
		case 8:
			b.bo.PutUint64(t[:], v)
		}
		w.Write(t[:size])
	}
	nfres := 0
	for _, f := range b.fdes {
		off := fres.Len()
		if b.version == 3 {
			put(&fres, 2, uint64(len(f.fres)))
			fres.Write([]byte{f.info, f.info2, f.repSize})
		}
		for _, e := range f.fres {
			put(&fres, 1<<(f.info&0xf), uint64(e.start))
			fres.WriteByte(e.info)
			for _, w := range e.words {
				put(&fres, 1<<(e.info>>5&3), uint64(int64(w)))
			}
		}
		nfres += len(f.fres)
		switch b.version {
		case 3:
			put(&fdes, 8, uint64(f.start))
			put(&fdes, 4, uint64(f.size))
			put(&fdes, 4, uint64(off))
		default:
			put(&fdes, 4, uint64(f.start))
			put(&fdes, 4, uint64(f.size))
			put(&fdes, 4, uint64(off))
			put(&fdes, 4, uint64(len(f.fres)))
			fdes.WriteByte(f.info)
			if b.version == 2 {
				fdes.Write([]byte{f.repSize, 0, 0})
			}
		}
	}
	var out bytes.Buffer
	put(&out, 2, 0xdee2)
	out.Write([]byte{b.version, b.flags, byte(b.abi), byte(b.fixFP), byte(b.fixRA), 0})
	put(&out, 4, uint64(len(b.fdes)))
	put(&out, 4, uint64(nfres))
	put(&out, 4, uint64(fres.Len()))
	put(&out, 4, 0)
	put(&out, 4, uint64(fdes.Len()))
	out.Write(fdes.Bytes())
	out.Write(fres.Bytes())
	return out.Bytes()
}

// amd64Funcs: two functions, the second with a frame pointer, 2-byte
// words and 2-byte start offsets; then a PLT (PCMASK).
func amd64Funcs(version uint8, bo binary.ByteOrder) *builder {
	return &builder{bo: bo, version: version, flags: sframe.FlagFDESorted, abi: sframe.ABIAMD64LE, fixRA: -8,
		fdes: []fdeSpec{
			{start: 0x100, size: 0x20, info: sframe.FREAddr1, fres: []freSpec{
				{0, freInfo(true, 1, 0, false), []int32{8}},
				{4, freInfo(true, 1, 0, false), []int32{16}},
			}},
			{start: 0x200, size: 0x400, info: sframe.FREAddr2, fres: []freSpec{
				{0, freInfo(true, 1, 0, false), []int32{8}},
				{1, freInfo(true, 2, 0, false), []int32{16, -16}},
				{4, freInfo(false, 2, 1, false), []int32{16, -16}},
				{0x300, freInfo(true, 2, 2, false), []int32{70000, -16}},
			}},
			{start: 0x700, size: 0x40, info: sframe.FREAddr1 | 0x10, repSize: 16, fres: []freSpec{
				{0, freInfo(true, 1, 0, false), []int32{8}},
				{11, freInfo(true, 1, 0, false), []int32{16}},
			}},
		}}
}

// TestSyntheticLookup checks rows in every version and both byte orders.
func TestSyntheticLookup(t *testing.T) {
	for _, v := range []uint8{1, 2, 3} {
		for _, bo := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
			b := amd64Funcs(v, bo)
			if v == 1 {
				b.fdes[2].repSize = 0 // no such field: lookups use 16
			}
			data := b.bytes()
			s, err := sframe.Parse(data, 0x1000, "synthetic")
			if err != nil {
				t.Fatalf("v%d %v: %v", v, bo, err)
			}
			if s.Order != bo || s.NumFDEs() != 3 || !s.Sorted() {
				t.Fatalf("v%d: order %v, %d FDEs, sorted %v", v, s.Order, s.NumFDEs(), s.Sorted())
			}
			for _, c := range []struct {
				pc   uint64
				ok   bool
				want string
			}{
				{0x10ff, false, ""},
				{0x1100, true, "cfa=sp+8 ra=[cfa-8] fp=same"},
				{0x1103, true, "cfa=sp+8 ra=[cfa-8] fp=same"},
				{0x1104, true, "cfa=sp+16 ra=[cfa-8] fp=same"},
				{0x111f, true, "cfa=sp+16 ra=[cfa-8] fp=same"},
				{0x1120, false, ""},
				{0x1201, true, "cfa=sp+16 ra=[cfa-8] fp=[cfa-16]"},
				{0x1204, true, "cfa=fp+16 ra=[cfa-8] fp=[cfa-16]"},
				{0x1500, true, "cfa=sp+70000 ra=[cfa-8] fp=[cfa-16]"},
				{0x1600, false, ""},
				{0x1700 + 16*2 + 10, true, "cfa=sp+8 ra=[cfa-8] fp=same"},
				{0x1700 + 16*3 + 11, true, "cfa=sp+16 ra=[cfa-8] fp=same"},
			} {
				row, ok := s.Lookup(c.pc)
				if ok != c.ok || ok && row.String() != c.want {
					t.Errorf("v%d %v: Lookup(%#x) = %v %v, want %v %s", v, bo, c.pc, row, ok, c.ok, c.want)
				}
			}
		}
	}
}

// TestPCRelative: with SFRAME_F_FDE_FUNC_START_PCREL the start address is
// relative to the field (the reference's vector: section at 0x402000,
// function at 0x401000, field at 0x40201c: -4124).
func TestPCRelative(t *testing.T) {
	for _, v := range []uint8{2, 3} {
		b := &builder{bo: binary.LittleEndian, version: v, flags: sframe.FlagFDESorted | sframe.FlagFuncStartPCRel,
			abi: sframe.ABIAMD64LE, fixRA: -8, fdes: []fdeSpec{{start: -4124, size: 25, fres: []freSpec{{0, freInfo(true, 1, 0, false), []int32{8}}}}}}
		s, err := sframe.Parse(b.bytes(), 0x402000, "pcrel")
		if err != nil {
			t.Fatal(err)
		}
		if got := s.FDE(0).Start; got != 0x401000 {
			t.Errorf("v%d: start %#x, want 0x401000", v, got)
		}
		if _, ok := s.Lookup(0x401018); !ok {
			t.Errorf("v%d: no row at 0x401018", v)
		}
	}
	// v1 is section-relative: -4096.
	b := &builder{bo: binary.LittleEndian, version: 1, abi: sframe.ABIAMD64LE, fixRA: -8,
		fdes: []fdeSpec{{start: -4096, size: 25, fres: []freSpec{{0, freInfo(true, 1, 0, false), []int32{8}}}}}}
	s, err := sframe.Parse(b.bytes(), 0x402000, "v1")
	if err != nil || s.FDE(0).Start != 0x401000 {
		t.Fatalf("v1: %v %#x", err, s.FDE(0).Start)
	}
}

// TestUnsorted: without the sorted flag (relocatable objects, kernel
// modules), lookups scan, and a wrong sorted flag is ignored.
func TestUnsorted(t *testing.T) {
	for _, flags := range []uint8{0, sframe.FlagFDESorted} {
		b := amd64Funcs(2, binary.LittleEndian)
		b.flags = flags
		b.fdes[0], b.fdes[2] = b.fdes[2], b.fdes[0]
		s, err := sframe.Parse(b.bytes(), 0x1000, "unsorted")
		if err != nil {
			t.Fatal(err)
		}
		if s.Sorted() {
			t.Errorf("flags %#x: section claims to be sorted", flags)
		}
		for _, pc := range []uint64{0x1100, 0x1204, 0x1710} {
			if _, ok := s.Lookup(pc); !ok {
				t.Errorf("flags %#x: no row at %#x", flags, pc)
			}
		}
	}
}

// TestAArch64AndS390x: RA/FP offsets from the FRE, RA in LR, mangled RA,
// key B, big-endian AArch64; s390x CFA scaling and v2 register numbers.
func TestAArch64AndS390x(t *testing.T) {
	for _, abi := range []sframe.ABI{sframe.ABIAArch64LE, sframe.ABIAArch64BE} {
		bo := binary.ByteOrder(binary.LittleEndian)
		if abi == sframe.ABIAArch64BE {
			bo = binary.BigEndian
		}
		b := &builder{bo: bo, version: 3, flags: sframe.FlagFDESorted | sframe.FlagFuncStartPCRel, abi: abi,
			fdes: []fdeSpec{{start: 0x100, size: 0x40, info: 0x20, fres: []freSpec{
				{0, freInfo(true, 1, 0, false), []int32{0}},
				{4, freInfo(true, 1, 0, true), []int32{0}},
				{8, freInfo(true, 3, 0, true), []int32{32, -24, -32}},
				{12, freInfo(false, 3, 0, true), []int32{32, -24, -32}},
				{0x3c, freInfo(true, 0, 0, false), nil},
			}}}}
		s, err := sframe.Parse(b.bytes(), 0, "a64")
		if err != nil {
			t.Fatal(err)
		}
		base := s.FDE(0).Start
		want := []string{"cfa=sp+0 ra=same fp=same", "cfa=sp+0 ra=same fp=same mangled",
			"cfa=sp+32 ra=[cfa-24] fp=[cfa-32] mangled", "cfa=fp+32 ra=[cfa-24] fp=[cfa-32] mangled", "cfa=sp+0 ra=undefined fp=same"}
		for i, off := range []uint64{0, 4, 8, 12, 0x3c} {
			row, ok := s.Lookup(base + off)
			if !ok || row.String() != want[i] || !row.PAuthKeyB {
				t.Errorf("%v +%#x: %v %v (key B %v), want %s", abi, off, row, ok, row.PAuthKeyB, want[i])
			}
		}
	}
	for _, v := range []uint8{2, 3} {
		b := &builder{bo: binary.BigEndian, version: v, flags: sframe.FlagFDESorted, abi: sframe.ABIS390XBE,
			fdes: []fdeSpec{{start: 0x100, size: 0x40, fres: []freSpec{
				{0, freInfo(true, 1, 0, false), []int32{0}},
				{4, freInfo(true, 3, 0, false), []int32{20, -48, -72}},
				{8, freInfo(true, 3, 0, false), []int32{0, 0, 14<<1 | 1}},
			}}}}
		s, err := sframe.Parse(b.bytes(), 0, "s390x")
		if err != nil {
			t.Fatal(err)
		}
		fp := "r14+0"
		if v == 3 {
			fp = "[cfa+29]" // no register encoding in v3 default FDEs
		}
		want := []string{"cfa=sp+160 ra=same fp=same", "cfa=sp+320 ra=[cfa-48] fp=[cfa-72]", "cfa=sp+160 ra=same fp=" + fp}
		for i, off := range []uint64{0, 4, 8} {
			if row, _ := s.Lookup(0x100 + off); row.String() != want[i] {
				t.Errorf("s390x v%d +%d: %v, want %s", v, off, row, want[i])
			}
		}
	}
}

// TestFlex: version 3 flexible FDEs: (control, offset) pairs, RA padding.
func TestFlex(t *testing.T) {
	ctrl := func(reg int, deref, regp bool) int32 {
		c := int32(reg << 3)
		if deref {
			c |= 2
		}
		if regp {
			c |= 1
		}
		return c
	}
	b := &builder{bo: binary.LittleEndian, version: 3, flags: sframe.FlagFDESorted, abi: sframe.ABIAMD64LE, fixRA: -8,
		fdes: []fdeSpec{{start: 0x100, size: 0x40, info2: 1, fres: []freSpec{
			{0, freInfo(true, 2, 0, false), []int32{ctrl(10, false, true), 0}},
			{4, freInfo(true, 5, 0, false), []int32{ctrl(6, true, true), -8, 0, ctrl(6, true, true), 0}},
			{8, freInfo(true, 4, 0, false), []int32{ctrl(7, false, true), 0, ctrl(11, false, true), 0}},
			{12, freInfo(true, 6, 0, false), []int32{ctrl(6, false, true), 16, ctrl(0, true, false), -8, ctrl(0, true, false), -16}},
		}}}}
	s, err := sframe.Parse(b.bytes(), 0, "flex")
	if err != nil {
		t.Fatal(err)
	}
	if !s.FDE(0).Flex() {
		t.Fatal("not flex")
	}
	want := []string{"cfa=r10+0 ra=[cfa-8] fp=same", "cfa=[fp-8] ra=[cfa-8] fp=[r6+0]",
		"cfa=sp+0 ra=r11+0 fp=same", "cfa=fp+16 ra=[cfa-8] fp=[cfa-16]"}
	for i, off := range []uint64{0, 4, 8, 12} {
		if row, _ := s.Lookup(0x100 + off); row.String() != want[i] {
			t.Errorf("+%d: %v, want %s", off, row, want[i])
		}
	}
	var out bytes.Buffer
	if err := sframe.Dump(&out, s, nil); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"0000000000000100  r10+0     u         f            ",
		"0000000000000104  (fp-8)    (fp+0)    U            ",
		"0000000000000108  sp+0      u         r11+0        ",
		"000000000000010c  fp+16     c-16      c-8          ",
		`attr = "F"`,
	} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("dump lacks %q:\n%s", line, out.String())
		}
	}
}

// TestHostile: malformed sections give errors that name the section and
// the offset, never panics.
func TestHostile(t *testing.T) {
	good := amd64Funcs(2, binary.LittleEndian).bytes()
	mod := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	le := binary.LittleEndian
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "shorter than"},
		{"magic", mod(func(b []byte) []byte { b[0] = 0; return b }), "bad magic"},
		{"version", mod(func(b []byte) []byte { b[2] = 9; return b }), "unsupported version 9"},
		{"abi", mod(func(b []byte) []byte { b[4] = 7; return b }), "unknown ABI"},
		{"fde count", mod(func(b []byte) []byte { le.PutUint32(b[8:], 1<<30); return b }), "FDE count 1073741824"},
		{"fre count", mod(func(b []byte) []byte { le.PutUint32(b[12:], 900); return b }), "FRE count 900 cannot fit"},
		{"fre len", mod(func(b []byte) []byte { le.PutUint32(b[16:], 1<<31); return b }), "runs past the end"},
		{"fde fres", mod(func(b []byte) []byte { le.PutUint32(b[28+12:], 9); return b }), "FRE count 9 runs past"},
		{"truncated", good[:len(good)-1], "runs past the end"},
		{"aux", mod(func(b []byte) []byte { b[7] = 255; return b[:100] }), "auxiliary header"},
		{"fre type", mod(func(b []byte) []byte { b[28+16] = 5; return b }), "unknown FRE type 5"},
	} {
		s, err := sframe.Parse(c.data, 0, "FILE .sframe")
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "sframe: FILE .sframe+0x") {
			t.Errorf("%s: %v, %v; want an error with %q", c.name, s, err, c.want)
		}
	}
	_, err := sframe.Parse([]byte{1, 2, 3, 4}, 0, "x")
	if !errors.Is(err, sframe.ErrNotSFrame) {
		t.Errorf("short non-SFrame data: %v", err)
	}
}

// TestDumpStyles: each readelf decodes only some versions.
func TestDumpStyles(t *testing.T) {
	v1, _ := sframe.Parse(amd64Funcs(1, binary.LittleEndian).bytes(), 0, "v1")
	var b bytes.Buffer
	if err := sframe.Dump(&b, v1, &sframe.DumpOptions{Style: sframe.Readelf244}); err != nil ||
		!strings.HasSuffix(b.String(), "\n No further information can be displayed.  SFrame version not supported\n") {
		t.Errorf("2.44 on v1: %v\n%s", err, b.String())
	}
	if err := sframe.Dump(&b, v1, &sframe.DumpOptions{Style: sframe.Readelf247}); !errors.Is(err, sframe.ErrStyle) {
		t.Errorf("2.47 on v1: %v", err)
	}
	v3, _ := sframe.Parse(amd64Funcs(3, binary.LittleEndian).bytes(), 0, "v3")
	if err := sframe.Dump(&b, v3, &sframe.DumpOptions{Style: sframe.Readelf240}); !errors.Is(err, sframe.ErrStyle) {
		t.Errorf("2.40 on v3: %v", err)
	}
}
