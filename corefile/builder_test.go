package corefile

import (
	"bytes"
	"debug/elf"
	"encoding/binary"

	"github.com/rewindstack/rewind/target"
)

// testNote is one note for buildCore.
type testNote struct {
	name string
	typ  uint32
	desc []byte
}

// testLoad is one PT_LOAD for buildCore; data is what the core holds
// (p_filesz = len(data)), memsz the mapping size.
type testLoad struct {
	vaddr uint64
	memsz uint64
	data  []byte
	flags elf.ProgFlag
}

// testCore describes a core for buildCore.
type testCore struct {
	class   elf.Class
	bo      binary.ByteOrder
	machine elf.Machine
	notes   []testNote
	loads   []testLoad
}

// buildCore lays out an ET_CORE file: header, program headers (one PT_NOTE,
// then the PT_LOADs), the notes, then the segment contents page-aligned.
func buildCore(tc testCore) []byte {
	bo := tc.bo
	if bo == nil {
		bo = binary.LittleEndian
	}
	is64 := tc.class != elf.ELFCLASS32
	ehsize, phsize := 52, 32
	if is64 {
		ehsize, phsize = 64, 56
	}
	var notes bytes.Buffer
	for _, n := range tc.notes {
		h := make([]byte, 12)
		bo.PutUint32(h[0:], uint32(len(n.name)+1))
		bo.PutUint32(h[4:], uint32(len(n.desc)))
		bo.PutUint32(h[8:], n.typ)
		notes.Write(h)
		notes.WriteString(n.name)
		notes.WriteByte(0)
		for notes.Len()%4 != 0 {
			notes.WriteByte(0)
		}
		notes.Write(n.desc)
		for notes.Len()%4 != 0 {
			notes.WriteByte(0)
		}
	}
	nph := 1 + len(tc.loads)
	noteOff := uint64(ehsize + nph*phsize)
	dataOff := noteOff + uint64(notes.Len())
	dataOff = (dataOff + 15) &^ 15
	offs := make([]uint64, len(tc.loads))
	cur := dataOff
	for i, l := range tc.loads {
		offs[i] = cur
		cur += uint64(len(l.data))
	}

	var out bytes.Buffer
	hdr := make([]byte, ehsize)
	copy(hdr, elf.ELFMAG)
	if is64 {
		hdr[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	} else {
		hdr[elf.EI_CLASS] = byte(elf.ELFCLASS32)
	}
	if bo == binary.LittleEndian {
		hdr[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	} else {
		hdr[elf.EI_DATA] = byte(elf.ELFDATA2MSB)
	}
	hdr[elf.EI_VERSION] = 1
	mach := tc.machine
	if mach == 0 {
		mach = elf.EM_X86_64
	}
	bo.PutUint16(hdr[16:], uint16(elf.ET_CORE))
	bo.PutUint16(hdr[18:], uint16(mach))
	bo.PutUint32(hdr[20:], 1)
	if is64 {
		bo.PutUint64(hdr[32:], uint64(ehsize))
		bo.PutUint16(hdr[52:], uint16(ehsize))
		bo.PutUint16(hdr[54:], uint16(phsize))
		bo.PutUint16(hdr[56:], uint16(nph))
		bo.PutUint16(hdr[58:], 64)
	} else {
		bo.PutUint32(hdr[28:], uint32(ehsize))
		bo.PutUint16(hdr[40:], uint16(ehsize))
		bo.PutUint16(hdr[42:], uint16(phsize))
		bo.PutUint16(hdr[44:], uint16(nph))
		bo.PutUint16(hdr[46:], 40)
	}
	out.Write(hdr)
	ph := func(typ elf.ProgType, flags elf.ProgFlag, off, vaddr, filesz, memsz uint64) {
		p := make([]byte, phsize)
		if is64 {
			bo.PutUint32(p[0:], uint32(typ))
			bo.PutUint32(p[4:], uint32(flags))
			bo.PutUint64(p[8:], off)
			bo.PutUint64(p[16:], vaddr)
			bo.PutUint64(p[32:], filesz)
			bo.PutUint64(p[40:], memsz)
			bo.PutUint64(p[48:], 1)
		} else {
			bo.PutUint32(p[0:], uint32(typ))
			bo.PutUint32(p[4:], uint32(off))
			bo.PutUint32(p[8:], uint32(vaddr))
			bo.PutUint32(p[16:], uint32(filesz))
			bo.PutUint32(p[20:], uint32(memsz))
			bo.PutUint32(p[24:], uint32(flags))
			bo.PutUint32(p[28:], 1)
		}
		out.Write(p)
	}
	ph(elf.PT_NOTE, 0, noteOff, 0, uint64(notes.Len()), 0)
	for i, l := range tc.loads {
		ph(elf.PT_LOAD, l.flags, offs[i], l.vaddr, uint64(len(l.data)), l.memsz)
	}
	out.Write(notes.Bytes())
	for uint64(out.Len()) < dataOff {
		out.WriteByte(0)
	}
	for _, l := range tc.loads {
		out.Write(l.data)
	}
	return out.Bytes()
}

// prstatus64 encodes an ELF64 NT_PRSTATUS with the given pr_reg words.
func prstatus64(bo binary.ByteOrder, tid int, sig int, reg []uint64) []byte {
	d := make([]byte, 112+len(reg)*8+8)
	bo.PutUint16(d[12:], uint16(sig))
	bo.PutUint32(d[32:], uint32(tid))
	for i, v := range reg {
		bo.PutUint64(d[112+i*8:], v)
	}
	return d
}

// prpsinfo64 encodes an ELF64 NT_PRPSINFO.
func prpsinfo64(bo binary.ByteOrder, pid int, fname, args string) []byte {
	d := make([]byte, 136)
	bo.PutUint32(d[24:], uint32(pid))
	copy(d[40:56], fname)
	copy(d[56:136], args)
	return d
}

// auxv64 encodes an auxiliary vector ending in AT_NULL.
func auxv64(bo binary.ByteOrder, kv ...uint64) []byte {
	d := make([]byte, (len(kv)+2)*8)
	for i, v := range kv {
		bo.PutUint64(d[i*8:], v)
	}
	return d
}

// ntFile64 encodes NT_FILE with the given page size; offsets are in bytes
// and are divided by pageSize.
func ntFile64(bo binary.ByteOrder, pageSize uint64, ms []target.Mapping) []byte {
	var b bytes.Buffer
	w := func(v uint64) {
		var x [8]byte
		bo.PutUint64(x[:], v)
		b.Write(x[:])
	}
	w(uint64(len(ms)))
	w(pageSize)
	for _, m := range ms {
		w(m.Start)
		w(m.End)
		w(m.Offset / pageSize)
	}
	for _, m := range ms {
		b.WriteString(m.Path)
		b.WriteByte(0)
	}
	return b.Bytes()
}

// sampleCore builds a small amd64 core: two threads, auxv, an NT_FILE
// entry for "/lib/fake.so" (whose first page is dumped, the rest not), an
// anonymous data segment, and a segment with nothing dumped and no file.
func sampleCore(bo binary.ByteOrder, pageSize uint64) []byte {
	reg := func(base uint64) []uint64 {
		r := make([]uint64, 27)
		for i := range r {
			r[i] = base + uint64(i)
		}
		return r
	}
	hdrPage := make([]byte, 0x1000)
	copy(hdrPage, fakeSO[:0x1000])
	return buildCore(testCore{
		bo: bo,
		notes: []testNote{
			{"CORE", ntPrstatus, prstatus64(bo, 100, 11, reg(0x1000))},
			{"CORE", ntPrpsinfo, prpsinfo64(bo, 100, "fake", "./fake --flag  ")},
			{"CORE", ntPrstatus, prstatus64(bo, 101, 0, reg(0x2000))},
			{"LINUX", 0x202, make([]byte, 32)},
			{"CORE", ntAuxv, auxv64(bo, AtPhdr, 0x400040, AtEntry, 0x401000, AtSysinfoEhdr, 0x7000)},
			{"CORE", ntFile, ntFile64(bo, pageSize, []target.Mapping{
				{Start: 0x400000, End: 0x403000, Offset: 0, Path: "/lib/fake.so"},
				{Start: 0x500000, End: 0x501000, Offset: 0x2000, Path: "/lib/fake.so"},
			})},
		},
		loads: []testLoad{
			{vaddr: 0x400000, memsz: 0x3000, data: hdrPage, flags: elf.PF_R | elf.PF_X},
			{vaddr: 0x403000, memsz: 0x1000, data: bytes.Repeat([]byte{0xaa}, 0x1000), flags: elf.PF_R | elf.PF_W},
			{vaddr: 0x600000, memsz: 0x1000, flags: elf.PF_R},
			{vaddr: 0x7000, memsz: 0x1000, data: append([]byte(elf.ELFMAG), make([]byte, 0xffc)...), flags: elf.PF_R | elf.PF_X},
		},
	})
}

// fakeSO is the content of "/lib/fake.so" for sampleCore: an ELF magic
// and then a byte pattern that encodes each offset.
var fakeSO = func() []byte {
	b := make([]byte, 0x3000)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	copy(b, elf.ELFMAG)
	return b
}()
