package elfobj

import (
	"bytes"
	"compress/zlib"
	"debug/elf"
	"encoding/binary"
)

// testSection describes a section for buildELF.
type testSection struct {
	name    string
	typ     elf.SectionType
	flags   elf.SectionFlag
	addr    uint64
	data    []byte
	link    uint32
	entsize uint64
	align   uint64
	// size overrides len(data) in the header when nonzero (to lie).
	size uint64
	// offset overrides the computed file offset when nonzero (to lie).
	offset uint64
}

// testProg describes a program header; when sec is set, Off, Filesz and
// (if zero) Vaddr/Memsz are taken from that section after layout.
type testProg struct {
	typ    elf.ProgType
	flags  elf.ProgFlag
	sec    string
	off    uint64
	vaddr  uint64
	filesz uint64
	memsz  uint64
	align  uint64
}

// testELF describes a whole ELF64 file for buildELF.
type testELF struct {
	bo       binary.ByteOrder
	typ      elf.Type
	machine  elf.Machine
	entry    uint64
	progs    []testProg
	sections []testSection // index 0 (SHT_NULL) and .shstrtab are added
	noShdrs  bool          // leave out the section header table
}

// buildELF lays out an ELF64 file: header, program headers, section
// contents, .shstrtab, section headers.
func buildELF(e testELF) []byte {
	bo := e.bo
	if bo == nil {
		bo = binary.LittleEndian
	}
	secs := append([]testSection{{}}, e.sections...)
	var shstr bytes.Buffer
	shstr.WriteByte(0)
	nameOff := make([]uint32, len(secs)+1)
	for i := 1; i < len(secs); i++ {
		nameOff[i] = uint32(shstr.Len())
		shstr.WriteString(secs[i].name)
		shstr.WriteByte(0)
	}
	nameOff[len(secs)] = uint32(shstr.Len())
	shstr.WriteString(".shstrtab\x00")
	secs = append(secs, testSection{name: ".shstrtab", typ: elf.SHT_STRTAB, data: shstr.Bytes(), align: 1})

	phoff := uint64(64)
	off := phoff + uint64(len(e.progs))*56
	offsets := make([]uint64, len(secs))
	var body bytes.Buffer
	for i := 1; i < len(secs); i++ {
		s := secs[i]
		if e.noShdrs && s.name == ".shstrtab" {
			continue
		}
		al := max(s.align, 1)
		for (off+uint64(body.Len()))%al != 0 {
			body.WriteByte(0)
		}
		offsets[i] = off + uint64(body.Len())
		if s.typ != elf.SHT_NOBITS {
			body.Write(s.data)
		}
	}
	for (off+uint64(body.Len()))%8 != 0 {
		body.WriteByte(0)
	}
	shoff := off + uint64(body.Len())

	var out bytes.Buffer
	hdr := make([]byte, 64)
	copy(hdr, elf.ELFMAG)
	hdr[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	if bo == binary.LittleEndian {
		hdr[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	} else {
		hdr[elf.EI_DATA] = byte(elf.ELFDATA2MSB)
	}
	hdr[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	typ := e.typ
	if typ == 0 {
		typ = elf.ET_DYN
	}
	mach := e.machine
	if mach == 0 {
		mach = elf.EM_X86_64
	}
	bo.PutUint16(hdr[16:], uint16(typ))
	bo.PutUint16(hdr[18:], uint16(mach))
	bo.PutUint32(hdr[20:], uint32(elf.EV_CURRENT))
	bo.PutUint64(hdr[24:], e.entry)
	if len(e.progs) > 0 {
		bo.PutUint64(hdr[32:], phoff)
	}
	if !e.noShdrs {
		bo.PutUint64(hdr[40:], shoff)
	}
	bo.PutUint16(hdr[52:], 64)
	bo.PutUint16(hdr[54:], 56)
	bo.PutUint16(hdr[56:], uint16(len(e.progs)))
	bo.PutUint16(hdr[58:], 64)
	if !e.noShdrs {
		bo.PutUint16(hdr[60:], uint16(len(secs)))
		bo.PutUint16(hdr[62:], uint16(len(secs)-1))
	}
	out.Write(hdr)

	for _, p := range e.progs {
		if p.sec != "" {
			for i := range secs {
				if secs[i].name == p.sec {
					p.off = offsets[i]
					p.filesz = uint64(len(secs[i].data))
					if p.vaddr == 0 {
						p.vaddr = secs[i].addr
					}
					if p.memsz == 0 {
						p.memsz = p.filesz
					}
				}
			}
		}
		ph := make([]byte, 56)
		bo.PutUint32(ph[0:], uint32(p.typ))
		bo.PutUint32(ph[4:], uint32(p.flags))
		bo.PutUint64(ph[8:], p.off)
		bo.PutUint64(ph[16:], p.vaddr)
		bo.PutUint64(ph[24:], p.vaddr)
		bo.PutUint64(ph[32:], p.filesz)
		bo.PutUint64(ph[40:], p.memsz)
		bo.PutUint64(ph[48:], p.align)
		out.Write(ph)
	}
	out.Write(body.Bytes())
	if e.noShdrs {
		return out.Bytes()
	}
	for i, s := range secs {
		sh := make([]byte, 64)
		if i > 0 {
			size := s.size
			if size == 0 {
				size = uint64(len(s.data))
			}
			o := offsets[i]
			if s.offset != 0 {
				o = s.offset
			}
			bo.PutUint32(sh[0:], nameOff[i])
			bo.PutUint32(sh[4:], uint32(s.typ))
			bo.PutUint64(sh[8:], uint64(s.flags))
			bo.PutUint64(sh[16:], s.addr)
			bo.PutUint64(sh[24:], o)
			bo.PutUint64(sh[32:], size)
			bo.PutUint32(sh[40:], s.link)
			bo.PutUint64(sh[48:], s.align)
			bo.PutUint64(sh[56:], s.entsize)
		}
		out.Write(sh)
	}
	return out.Bytes()
}

// testSym is a symbol for symtabData.
type testSym struct {
	name  string
	value uint64
	size  uint64
	typ   elf.SymType
	bind  elf.SymBind
	shndx uint16
}

// symtabData encodes ELF64 symbols (after the null symbol) and their
// string table.
func symtabData(bo binary.ByteOrder, syms []testSym) (symtab, strtab []byte) {
	var st, str bytes.Buffer
	str.WriteByte(0)
	st.Write(make([]byte, 24))
	for _, s := range syms {
		e := make([]byte, 24)
		bo.PutUint32(e[0:], uint32(str.Len()))
		str.WriteString(s.name)
		str.WriteByte(0)
		e[4] = byte(s.bind)<<4 | byte(s.typ)
		bo.PutUint16(e[6:], s.shndx)
		bo.PutUint64(e[8:], s.value)
		bo.PutUint64(e[16:], s.size)
		st.Write(e)
	}
	return st.Bytes(), str.Bytes()
}

// noteData encodes one note with 4-byte padding.
func noteData(bo binary.ByteOrder, name string, typ uint32, desc []byte) []byte {
	var b bytes.Buffer
	h := make([]byte, 12)
	bo.PutUint32(h[0:], uint32(len(name)+1))
	bo.PutUint32(h[4:], uint32(len(desc)))
	bo.PutUint32(h[8:], typ)
	b.Write(h)
	b.WriteString(name)
	b.WriteByte(0)
	for b.Len()%4 != 0 {
		b.WriteByte(0)
	}
	b.Write(desc)
	for b.Len()%4 != 0 {
		b.WriteByte(0)
	}
	return b.Bytes()
}

// compressedSection returns an SHF_COMPRESSED payload: an Elf64_Chdr
// followed by data compressed with ch_type typ (zlib, or zstd using raw
// blocks). size overrides ch_size when nonzero.
func compressedSection(bo binary.ByteOrder, typ elf.CompressionType, data []byte, size uint64) []byte {
	if size == 0 {
		size = uint64(len(data))
	}
	var b bytes.Buffer
	ch := make([]byte, 24)
	bo.PutUint32(ch[0:], uint32(typ))
	bo.PutUint64(ch[8:], size)
	bo.PutUint64(ch[16:], 8)
	b.Write(ch)
	switch typ {
	case elf.COMPRESS_ZLIB:
		w := zlib.NewWriter(&b)
		w.Write(data)
		w.Close()
	case elf.COMPRESS_ZSTD:
		b.Write(zstdRaw(data))
	}
	return b.Bytes()
}

// zstdRaw encodes data as a zstd frame of uncompressed ("raw") blocks, which
// is enough to exercise a zstd decoder without a zstd encoder.
func zstdRaw(data []byte) []byte {
	var b bytes.Buffer
	b.Write([]byte{0x28, 0xb5, 0x2f, 0xfd})
	// Frame header descriptor: single segment, 8-byte frame content size.
	b.WriteByte(0xc0 | 0x20)
	var fcs [8]byte
	binary.LittleEndian.PutUint64(fcs[:], uint64(len(data)))
	b.Write(fcs[:])
	const maxBlock = 128 << 10
	for first := true; first || len(data) > 0; first = false {
		n := min(len(data), maxBlock)
		last := 0
		if n == len(data) {
			last = 1
		}
		h := uint32(n)<<3 | 0<<1 | uint32(last) // block type 0: raw
		b.Write([]byte{byte(h), byte(h >> 8), byte(h >> 16)})
		b.Write(data[:n])
		data = data[n:]
	}
	return b.Bytes()
}

// sampleELF builds a small shared object with code, symbols, unwind
// sections, a build-id note, a debug link, and a compressed .debug_frame of
// the given compression type (0 for none).
func sampleELF(bo binary.ByteOrder, ct elf.CompressionType) []byte {
	text := bytes.Repeat([]byte{0x90}, 0x100) // nops
	text[0x40] = 0xc3
	// Section indices: 1 .text, 2 .eh_frame_hdr, 3 .eh_frame,
	// 4 .note.gnu.build-id, 5 .symtab, 6 .strtab, 7 .data, 8 .bss,
	// 9 .gnu_debuglink, 10 .debug_frame, 11 .got.plt.
	syms, strs := symtabData(bo, []testSym{
		{"local_fn", 0x1000, 0x40, elf.STT_FUNC, elf.STB_LOCAL, 1},
		{"alias_local", 0x1040, 0x20, elf.STT_FUNC, elf.STB_LOCAL, 1},
		{"global_fn", 0x1040, 0x20, elf.STT_FUNC, elf.STB_GLOBAL, 1},
		{"unsized", 0x1080, 0, elf.STT_NOTYPE, elf.STB_GLOBAL, 1},
		{"tail", 0x10c0, 0, elf.STT_FUNC, elf.STB_WEAK, 1},
		{"nested", 0x1010, 0x8, elf.STT_FUNC, elf.STB_LOCAL, 1},
		{"data_obj", 0x2000, 8, elf.STT_OBJECT, elf.STB_GLOBAL, 7},
		{"$x", 0x1090, 0, elf.STT_NOTYPE, elf.STB_LOCAL, 1},
		{"undef", 0, 0, elf.STT_FUNC, elf.STB_GLOBAL, 0},
	})
	debugLink := []byte("sample.debug\x00\x00\x00\x00\x00\x00\x00\x00")
	bo.PutUint32(debugLink[16:], 0xdeadbeef)
	frame := bytes.Repeat([]byte("CIE-FDE-"), 32)
	var frameSec testSection
	if ct == 0 {
		frameSec = testSection{name: ".debug_frame", typ: elf.SHT_PROGBITS, data: frame, align: 8}
	} else {
		frameSec = testSection{name: ".debug_frame", typ: elf.SHT_PROGBITS, flags: elf.SHF_COMPRESSED,
			data: compressedSection(bo, ct, frame, 0), align: 8}
	}
	return buildELF(testELF{
		bo:    bo,
		entry: 0x1000,
		progs: []testProg{
			{typ: elf.PT_LOAD, flags: elf.PF_R | elf.PF_X, sec: ".text", align: 0x1000},
			{typ: elf.PT_LOAD, flags: elf.PF_R | elf.PF_W, sec: ".data", memsz: 0x100, align: 0x1000},
			{typ: elf.PT_NOTE, flags: elf.PF_R, sec: ".note.gnu.build-id", align: 4},
			{typ: elf.PT_GNU_EH_FRAME, flags: elf.PF_R, sec: ".eh_frame_hdr", align: 4},
		},
		sections: []testSection{
			{name: ".text", typ: elf.SHT_PROGBITS, flags: elf.SHF_ALLOC | elf.SHF_EXECINSTR, addr: 0x1000, data: text, align: 16},
			{name: ".eh_frame_hdr", typ: elf.SHT_PROGBITS, flags: elf.SHF_ALLOC, addr: 0x1400, data: []byte{1, 0x1b, 3, 0x3b, 0, 0, 0, 0, 0, 0, 0, 0}, align: 4},
			{name: ".eh_frame", typ: elf.SHT_PROGBITS, flags: elf.SHF_ALLOC, addr: 0x1410, data: make([]byte, 16), align: 8},
			{name: ".note.gnu.build-id", typ: elf.SHT_NOTE, flags: elf.SHF_ALLOC, addr: 0x1500,
				data: noteData(bo, "GNU", 3, []byte{0xde, 0xad, 0xbe, 0xef, 0x01, 0x02}), align: 4},
			{name: ".symtab", typ: elf.SHT_SYMTAB, data: syms, link: 6, entsize: 24, align: 8},
			{name: ".strtab", typ: elf.SHT_STRTAB, data: strs, align: 1},
			{name: ".data", typ: elf.SHT_PROGBITS, flags: elf.SHF_ALLOC | elf.SHF_WRITE, addr: 0x2000, data: []byte("DATADATA"), align: 8},
			{name: ".bss", typ: elf.SHT_NOBITS, flags: elf.SHF_ALLOC | elf.SHF_WRITE, addr: 0x2008, size: 0xf8, align: 8},
			{name: ".gnu_debuglink", typ: elf.SHT_PROGBITS, data: debugLink, align: 4},
			frameSec,
			{name: ".got.plt", typ: elf.SHT_PROGBITS, flags: elf.SHF_ALLOC | elf.SHF_WRITE, addr: 0x2100, data: make([]byte, 24), align: 8},
		},
	})
}
