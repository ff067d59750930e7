package elfobj

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"io"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/regs"
)

// onlyReaderAt hides Size so NewFile cannot learn the file length.
type onlyReaderAt struct{ r io.ReaderAt }

func (o onlyReaderAt) ReadAt(p []byte, off int64) (int, error) { return o.r.ReadAt(p, off) }

func TestSyntheticFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		bo   binary.ByteOrder
		ct   elf.CompressionType
	}{
		{"plain-le", binary.LittleEndian, 0},
		{"zlib-le", binary.LittleEndian, elf.COMPRESS_ZLIB},
		{"zstd-le", binary.LittleEndian, elf.COMPRESS_ZSTD},
		{"zlib-be", binary.BigEndian, elf.COMPRESS_ZLIB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := sampleELF(tc.bo, tc.ct)
			for _, sized := range []bool{true, false} {
				var r io.ReaderAt = bytes.NewReader(img)
				if !sized {
					r = onlyReaderAt{r}
				}
				f, err := NewFile(r, "sample.so")
				if err != nil {
					t.Fatal(err)
				}
				checkSample(t, f, tc.bo)
			}
		})
	}
}

func checkSample(t *testing.T, f *File, bo binary.ByteOrder) {
	t.Helper()
	if f.Arch != regs.AMD64 || f.Type != elf.ET_DYN || f.ByteOrder != bo || f.Class != elf.ELFCLASS64 {
		t.Errorf("header: arch %v type %v order %v class %v", f.Arch, f.Type, f.ByteOrder, f.Class)
	}
	if got := f.BuildIDHex(); got != "deadbeef0102" {
		t.Errorf("build-id %q", got)
	}
	if f.DebugLink != "sample.debug" || f.DebugLinkCRC != 0xdeadbeef {
		t.Errorf("debuglink %q %#x", f.DebugLink, f.DebugLinkCRC)
	}
	if len(f.Loads) != 2 || f.Loads[0].Vaddr != 0x1000 || f.Loads[1].Memsz != 0x100 || f.Loads[1].Flags != elf.PF_R|elf.PF_W {
		t.Errorf("loads %+v", f.Loads)
	}
	want := bytes.Repeat([]byte("CIE-FDE-"), 32)
	if f.DebugFrame == nil || !bytes.Equal(f.DebugFrame.Data, want) || f.DebugFrame.Size != uint64(len(want)) {
		t.Errorf("debug_frame %+v", f.DebugFrame)
	}
	if f.EhFrame == nil || f.EhFrame.Addr != 0x1410 || len(f.EhFrame.Data) != 16 {
		t.Errorf("eh_frame %+v", f.EhFrame)
	}
	if f.EhFrameHdr == nil || f.EhFrameHdr.Data[0] != 1 || f.GotPlt == nil || f.GotPlt.Addr != 0x2100 {
		t.Errorf("eh_frame_hdr %+v got.plt %+v", f.EhFrameHdr, f.GotPlt)
	}
	if f.SFrame != nil {
		t.Errorf("unexpected .sframe")
	}
	if f.Text == nil || f.Text.Data != nil || f.Text.Size != 0x100 {
		t.Fatalf("text %+v", f.Text)
	}
	if d, err := f.Text.Load(); err != nil || len(d) != 0x100 || d[0x40] != 0xc3 {
		t.Errorf("text load: %v", err)
	}
	for _, c := range []struct {
		addr uint64
		name string
		off  uint64
		ok   bool
	}{
		{0x1000, "local_fn", 0, true},
		{0x1012, "nested", 2, true},
		{0x1018, "local_fn", 0x18, true}, // after the nested symbol ends
		{0x1040, "global_fn", 0, true},   // global beats local alias
		{0x105f, "global_fn", 0x1f, true},
		{0x1060, "", 0, false}, // gap after a sized symbol
		{0x1080, "unsized", 0, true},
		{0x1095, "unsized", 0x15, true}, // "$x" mapping symbols are ignored
		{0x10c0, "tail", 0, true},
		{0x10ff, "tail", 0x3f, true}, // capped at the end of .text
		{0x1100, "", 0, false},
		{0x2000, "", 0, false}, // objects are not functions
		{0xfff, "", 0, false},
	} {
		name, off, ok := f.Symbolize(c.addr)
		if name != c.name || off != c.off || ok != c.ok {
			t.Errorf("Symbolize(%#x) = %q+%#x %v, want %q+%#x %v", c.addr, name, off, ok, c.name, c.off, c.ok)
		}
	}
	if a, ok := f.SymbolByName("alias_local"); !ok || a != 0x1040 {
		t.Errorf("SymbolByName(alias_local) = %#x %v", a, ok)
	}
	if _, ok := f.SymbolByName("data_obj"); ok {
		t.Errorf("SymbolByName(data_obj) found an object")
	}
	buf := make([]byte, 16)
	if err := f.ReadVaddr(0x2000, buf); err != nil || string(buf[:8]) != "DATADATA" || !bytes.Equal(buf[8:], make([]byte, 8)) {
		t.Errorf("ReadVaddr(.data) = %q, %v", buf, err)
	}
	if err := f.ReadVaddr(0x10f8, buf); err == nil || !strings.Contains(err.Error(), "0x1100") {
		t.Errorf("ReadVaddr past the segment: %v", err)
	}
}

func TestNoSectionHeaders(t *testing.T) {
	img := buildELF(testELF{
		progs: []testProg{
			{typ: elf.PT_LOAD, flags: elf.PF_R | elf.PF_X, sec: ".text", align: 0x1000},
			{typ: elf.PT_GNU_EH_FRAME, flags: elf.PF_R, sec: ".eh_frame_hdr", align: 4},
		},
		sections: []testSection{
			{name: ".text", typ: elf.SHT_PROGBITS, addr: 0x1000, data: []byte{0xc3}},
			{name: ".eh_frame_hdr", typ: elf.SHT_PROGBITS, addr: 0x1004, data: []byte{1, 2, 3, 4}},
		},
		noShdrs: true,
	})
	f, err := NewFile(bytes.NewReader(img), "stripped")
	if err != nil {
		t.Fatal(err)
	}
	if f.EhFrameHdr == nil || f.EhFrameHdr.Addr != 0x1004 || !bytes.Equal(f.EhFrameHdr.Data, []byte{1, 2, 3, 4}) {
		t.Errorf("eh_frame_hdr from PT_GNU_EH_FRAME: %+v", f.EhFrameHdr)
	}
	if f.Text != nil || f.NumSymbols() != 0 {
		t.Errorf("text %+v, %d symbols", f.Text, f.NumSymbols())
	}
}

// TestHostile feeds files that lie about sizes and compression and checks
// that each fails with an error naming the file, the section and, where it
// helps, the offset.
func TestHostile(t *testing.T) {
	bo := binary.LittleEndian
	frame := bytes.Repeat([]byte("frame"), 100)
	zl := compressedSection(bo, elf.COMPRESS_ZLIB, frame, 0)
	mk := func(s testSection) []byte {
		return buildELF(testELF{sections: []testSection{s}})
	}
	for _, c := range []struct {
		name string
		img  []byte
		want []string
	}{
		{"truncated zlib", mk(testSection{name: ".debug_frame", typ: elf.SHT_PROGBITS, flags: elf.SHF_COMPRESSED, data: zl[:len(zl)-20]}),
			[]string{"elfobj: bad.so: .debug_frame+0x0: decompressing: zlib: unexpected EOF"}},
		{"zlib garbage", mk(testSection{name: ".debug_frame", typ: elf.SHT_PROGBITS, flags: elf.SHF_COMPRESSED,
			data: append(zl[:24:24], 0x99, 0x99, 0x99)}),
			[]string{"elfobj: bad.so: .debug_frame+0x0: decompressing: zlib: "}},
		{"zstd garbage", mk(testSection{name: ".debug_frame", typ: elf.SHT_PROGBITS, flags: elf.SHF_COMPRESSED,
			data: compressedSection(bo, elf.COMPRESS_ZSTD, frame, 0)[:40]}),
			[]string{"elfobj: bad.so: .debug_frame+0x0: decompressing: zstd: "}},
		{"short decompressed", mk(testSection{name: ".debug_frame", typ: elf.SHT_PROGBITS, flags: elf.SHF_COMPRESSED,
			data: compressedSection(bo, elf.COMPRESS_ZLIB, frame, 4000)}),
			[]string{".debug_frame+0x0: decompressing: zlib: unexpected EOF"}},
		{"huge ch_size", mk(testSection{name: ".debug_frame", typ: elf.SHT_PROGBITS, flags: elf.SHF_COMPRESSED,
			data: compressedSection(bo, elf.COMPRESS_ZLIB, frame, 1<<40)}),
			[]string{".debug_frame+0x0: decompressing: offset 0x", "implausible"}},
		{"unknown compression", mk(testSection{name: ".debug_frame", typ: elf.SHT_PROGBITS, flags: elf.SHF_COMPRESSED,
			data: compressedSection(bo, 7, frame, 0)}),
			[]string{".debug_frame+0x0: decompressing: offset 0x", "unknown compression type 7"}},
		{"section past EOF", mk(testSection{name: ".eh_frame", typ: elf.SHT_PROGBITS, data: []byte{1}, size: 1 << 40}),
			[]string{"elfobj: bad.so: .eh_frame+0x0: reading its contents: offset 0x", "beyond end of file"}},
		{"offset past EOF", mk(testSection{name: ".eh_frame", typ: elf.SHT_PROGBITS, data: []byte{1}, offset: 1 << 50}),
			[]string{".eh_frame+0x0: reading its contents: offset 0x4000000000000"}},
		{"not elf", []byte("#!/bin/sh\necho hello, this is not an ELF file\n"), []string{"elfobj: bad.so: ELF header+0x0: not an ELF file"}},
		{"empty", nil, []string{"elfobj: bad.so: ELF header+0x0: reading it: unexpected EOF"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, r := range []io.ReaderAt{bytes.NewReader(c.img), onlyReaderAt{bytes.NewReader(c.img)}} {
				_, err := NewFile(r, "bad.so")
				if err == nil {
					t.Fatal("no error")
				}
				for _, w := range c.want {
					if _, sized := r.(*bytes.Reader); !sized && strings.Contains(w, "beyond end") {
						continue // without a size the read just comes up short
					}
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
			}
		})
	}
}

func TestCompressedShstrtab(t *testing.T) {
	img := sampleELF(binary.LittleEndian, 0)
	// Set SHF_COMPRESSED on the last section header, .shstrtab.
	shoff := binary.LittleEndian.Uint64(img[40:])
	shnum := binary.LittleEndian.Uint16(img[60:])
	flags := img[shoff+uint64(shnum-1)*64+8:]
	binary.LittleEndian.PutUint64(flags, uint64(elf.SHF_COMPRESSED))
	_, err := NewFile(bytes.NewReader(img), "x")
	if err == nil || !strings.Contains(err.Error(), "elfobj: x: section header") {
		t.Errorf("err = %v", err)
	}
}

func TestBadSymtab(t *testing.T) {
	bo := binary.LittleEndian
	syms, _ := symtabData(bo, []testSym{{"f", 0x1000, 4, elf.STT_FUNC, elf.STB_GLOBAL, 1}})
	img := buildELF(testELF{sections: []testSection{
		{name: ".text", typ: elf.SHT_PROGBITS, flags: elf.SHF_ALLOC | elf.SHF_EXECINSTR, addr: 0x1000, data: make([]byte, 8)},
		{name: ".symtab", typ: elf.SHT_SYMTAB, data: syms, link: 1, entsize: 24},
	}})
	f, err := NewFile(bytes.NewReader(img), "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.LoadSymbols(); err == nil || !strings.Contains(err.Error(), "elfobj: x: .symtab+0x0: linked section 1 is not a string table") {
		t.Errorf("LoadSymbols: %v", err)
	}
	if _, _, ok := f.Symbolize(0x1000); ok {
		t.Error("Symbolize succeeded with a bad table")
	}
}

// TestTruncations opens every prefix of the sample files: none may panic,
// and every error must name the file.
func TestTruncations(t *testing.T) {
	for _, ct := range []elf.CompressionType{0, elf.COMPRESS_ZLIB, elf.COMPRESS_ZSTD} {
		img := sampleELF(binary.LittleEndian, ct)
		for n := 0; n < len(img); n++ {
			f, err := NewFile(bytes.NewReader(img[:n]), "trunc")
			if err != nil {
				if !strings.HasPrefix(err.Error(), "elfobj: trunc: ") {
					t.Fatalf("len %d: error does not name the file: %v", n, err)
				}
				continue
			}
			exercise(f)
		}
	}
}

// exercise calls every accessor, for truncation and fuzz tests.
func exercise(f *File) {
	f.BuildIDHex()
	if f.Text != nil {
		f.Text.Load()
	}
	f.LoadSymbols()
	for _, s := range f.Loads {
		f.Symbolize(s.Vaddr)
		f.Symbolize(s.Vaddr + s.Memsz/2)
		f.Bias(0x7f0000000000, s.Offset&^0xfff)
		var b [64]byte
		f.ReadVaddr(s.Vaddr, b[:])
		f.ReadVaddr(s.Vaddr+s.Memsz-8, b[:])
	}
	f.SymbolByName("main")
	f.Bias(0x400000, 0)
}

// TestConcurrentFirstUse races the lazy loaders (run with -race).
func TestConcurrentFirstUse(t *testing.T) {
	f, err := NewFile(bytes.NewReader(sampleELF(binary.LittleEndian, elf.COMPRESS_ZLIB)), "c.so")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan string)
	for i := 0; i < 8; i++ {
		go func() {
			name, _, _ := f.Symbolize(0x1044)
			if _, err := f.Text.Load(); err != nil {
				name = err.Error()
			}
			done <- name
		}()
	}
	for i := 0; i < 8; i++ {
		if got := <-done; got != "global_fn" {
			t.Errorf("goroutine got %q", got)
		}
	}
}
