// Package elfedit writes a copy of a 64-bit ELF file with one section
// added, as objcopy --add-section does, and, where it can, puts the new
// section in a new loadable segment with a program header of its own
// (PT_GNU_SFRAME for .sframe, say) so that the section is in memory at run
// time.
//
// The input is never modified in place. Nothing of the original file
// moves: the new bytes (section contents, a grown program header table, a
// grown section-name table and the new section header table) are all
// appended, and only the ELF header and the headers that describe moved
// tables are rewritten.
//
// Loading the section needs two more program headers, and the table that
// holds them normally has no room to grow where it is (the first sections
// follow it). The table is therefore moved into the new PT_LOAD segment,
// placed past the end of every existing segment, with its file offset and
// address keeping the first segment's offset-to-address difference. Then
// the kernel finds the table (AT_PHDR) both the old way (load address plus
// e_phoff) and the new way (the PT_LOAD that contains e_phoff), and a
// PT_PHDR entry, if any, is pointed at it.
package elfedit

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
)

// Section describes the section to add.
type Section struct {
	// Name is the section name, such as ".sframe".
	Name string
	// Type is sh_type (elf.SHT_PROGBITS, for example).
	Type elf.SectionType
	// Flags are sh_flags; SHF_ALLOC is added when the section is loaded.
	Flags elf.SectionFlag
	// Align is sh_addralign (at least 1).
	Align uint64
	// Size is the size of the contents.
	Size uint64
	// Contents returns the section's bytes (Size of them) for the address
	// the section gets: its run-time address in the object when loaded,
	// else 0.
	Contents func(addr uint64) ([]byte, error)
	// Load asks for the section to be put in a new PT_LOAD segment.
	Load bool
	// Segment, when not 0 and the section is loaded, is the type of a
	// program header to add that covers exactly the section.
	Segment elf.ProgType
	// SegmentAlign is that program header's p_align.
	SegmentAlign uint64
}

// Result says where the section went.
type Result struct {
	// Offset is the section's offset in the new file.
	Offset uint64
	// Addr is its address, 0 when not loaded.
	Addr uint64
	// Loaded reports that the section is in a new PT_LOAD segment.
	Loaded bool
	// Note explains, when Load was asked for, why the section was not
	// loaded.
	Note string
}

// MaxPadding bounds the zero bytes inserted to place the new segment past
// the end of the existing ones (a large .bss makes that gap large). Past
// it the section is added without loading it.
const MaxPadding = 64 << 20

const (
	ehdrSize = 64
	phdrSize = 56
	shdrSize = 64
)

// header is the ELF header fields this package reads and rewrites.
type header struct {
	order                 binary.ByteOrder
	typ                   elf.Type
	phoff, shoff          uint64
	phnum, shnum, shstrnd int
}

type phdr struct {
	typ                              elf.ProgType
	flags                            elf.ProgFlag
	off, vaddr, paddr, filesz, memsz uint64
	align                            uint64
}

type shdr struct {
	name, typ              uint32
	flags, addr, off, size uint64
	link, info             uint32
	addralign, entsize     uint64
}

// FormatError reports a file this package cannot edit.
type FormatError struct {
	Off uint64
	Msg string
}

// Error formats the error as "elfedit: offset 0xOFF: MSG".
func (e *FormatError) Error() string { return fmt.Sprintf("elfedit: offset %#x: %s", e.Off, e.Msg) }

// ErrExists is returned when the file already has a section of the name.
var ErrExists = errors.New("section already present")

func bad(off uint64, format string, args ...any) error {
	return &FormatError{Off: off, Msg: fmt.Sprintf(format, args...)}
}

func parseHeader(b []byte) (*header, error) {
	if len(b) < ehdrSize || string(b[:4]) != elf.ELFMAG {
		return nil, bad(0, "not an ELF file")
	}
	if elf.Class(b[elf.EI_CLASS]) != elf.ELFCLASS64 {
		return nil, bad(uint64(elf.EI_CLASS), "only 64-bit ELF files are supported")
	}
	h := &header{}
	switch elf.Data(b[elf.EI_DATA]) {
	case elf.ELFDATA2LSB:
		h.order = binary.LittleEndian
	case elf.ELFDATA2MSB:
		h.order = binary.BigEndian
	default:
		return nil, bad(uint64(elf.EI_DATA), "unknown data encoding %d", b[elf.EI_DATA])
	}
	bo := h.order
	h.typ = elf.Type(bo.Uint16(b[16:]))
	h.phoff = bo.Uint64(b[32:])
	h.shoff = bo.Uint64(b[40:])
	phentsize, shentsize := bo.Uint16(b[54:]), bo.Uint16(b[58:])
	h.phnum, h.shnum, h.shstrnd = int(bo.Uint16(b[56:])), int(bo.Uint16(b[60:])), int(bo.Uint16(b[62:]))
	size := uint64(len(b))
	if h.phnum > 0 {
		if phentsize != phdrSize {
			return nil, bad(54, "program header entry size %d, want %d", phentsize, phdrSize)
		}
		if h.phnum == 0xffff {
			return nil, bad(56, "extended program header numbering is not supported")
		}
		if h.phoff > size || uint64(h.phnum)*phdrSize > size-h.phoff {
			return nil, bad(32, "program header table (%d entries at %#x) runs past the end of the %d-byte file", h.phnum, h.phoff, size)
		}
	}
	if h.shoff == 0 || h.shnum == 0 {
		return nil, bad(40, "no section header table (or extended section numbering)")
	}
	if shentsize != shdrSize {
		return nil, bad(58, "section header entry size %d, want %d", shentsize, shdrSize)
	}
	if h.shoff > size || uint64(h.shnum)*shdrSize > size-h.shoff {
		return nil, bad(40, "section header table (%d entries at %#x) runs past the end of the %d-byte file", h.shnum, h.shoff, size)
	}
	if h.shstrnd == 0 || h.shstrnd >= h.shnum {
		return nil, bad(62, "section name table index %d is not a section (of %d)", h.shstrnd, h.shnum)
	}
	return h, nil
}

func readPhdr(b []byte, bo binary.ByteOrder) phdr {
	return phdr{typ: elf.ProgType(bo.Uint32(b)), flags: elf.ProgFlag(bo.Uint32(b[4:])), off: bo.Uint64(b[8:]),
		vaddr: bo.Uint64(b[16:]), paddr: bo.Uint64(b[24:]), filesz: bo.Uint64(b[32:]), memsz: bo.Uint64(b[40:]),
		align: bo.Uint64(b[48:])}
}

func (p *phdr) put(b []byte, bo binary.ByteOrder) {
	bo.PutUint32(b, uint32(p.typ))
	bo.PutUint32(b[4:], uint32(p.flags))
	bo.PutUint64(b[8:], p.off)
	bo.PutUint64(b[16:], p.vaddr)
	bo.PutUint64(b[24:], p.paddr)
	bo.PutUint64(b[32:], p.filesz)
	bo.PutUint64(b[40:], p.memsz)
	bo.PutUint64(b[48:], p.align)
}

func readShdr(b []byte, bo binary.ByteOrder) shdr {
	return shdr{name: bo.Uint32(b), typ: bo.Uint32(b[4:]), flags: bo.Uint64(b[8:]), addr: bo.Uint64(b[16:]),
		off: bo.Uint64(b[24:]), size: bo.Uint64(b[32:]), link: bo.Uint32(b[40:]), info: bo.Uint32(b[44:]),
		addralign: bo.Uint64(b[48:]), entsize: bo.Uint64(b[56:])}
}

func (s *shdr) put(b []byte, bo binary.ByteOrder) {
	bo.PutUint32(b, s.name)
	bo.PutUint32(b[4:], s.typ)
	bo.PutUint64(b[8:], s.flags)
	bo.PutUint64(b[16:], s.addr)
	bo.PutUint64(b[24:], s.off)
	bo.PutUint64(b[32:], s.size)
	bo.PutUint32(b[40:], s.link)
	bo.PutUint32(b[44:], s.info)
	bo.PutUint64(b[48:], s.addralign)
	bo.PutUint64(b[56:], s.entsize)
}

func alignUp(x, a uint64) uint64 {
	if a <= 1 {
		return x
	}
	return (x + a - 1) / a * a
}

// sectionName returns the NUL-terminated name at off in the name table.
func sectionName(tab []byte, off uint32) string {
	if uint64(off) >= uint64(len(tab)) {
		return ""
	}
	for i := int(off); i < len(tab); i++ {
		if tab[i] == 0 {
			return string(tab[off:i])
		}
	}
	return string(tab[off:])
}

// AddSection returns a copy of the ELF file in with the section added.
// The result's Note says why a section asked to be loaded was not (a
// relocatable object, a file without PT_LOAD segments, too much padding
// needed); the section is then added as a non-allocated one.
func AddSection(in []byte, s Section) ([]byte, *Result, error) {
	h, err := parseHeader(in)
	if err != nil {
		return nil, nil, err
	}
	bo := h.order
	if s.Align == 0 {
		s.Align = 1
	}
	shdrs := make([]shdr, h.shnum)
	for i := range shdrs {
		shdrs[i] = readShdr(in[h.shoff+uint64(i)*shdrSize:], bo)
	}
	strtab := shdrs[h.shstrnd]
	if strtab.typ != uint32(elf.SHT_STRTAB) || strtab.off > uint64(len(in)) || strtab.size > uint64(len(in))-strtab.off {
		return nil, nil, bad(h.shoff+uint64(h.shstrnd)*shdrSize, "section name table is not a string table inside the file")
	}
	names := in[strtab.off : strtab.off+strtab.size]
	for i := range shdrs {
		if sectionName(names, shdrs[i].name) == s.Name {
			return nil, nil, fmt.Errorf("elfedit: %s: %w", s.Name, ErrExists)
		}
	}
	phdrs := make([]phdr, h.phnum)
	for i := range phdrs {
		phdrs[i] = readPhdr(in[h.phoff+uint64(i)*phdrSize:], bo)
	}

	res := &Result{}
	out := append([]byte(nil), in...)
	pad := func(to uint64) {
		for uint64(len(out)) < to {
			out = append(out, 0)
		}
	}

	// Where a loaded section goes.
	var seg uint64   // file offset of the new segment
	var delta uint64 // address - offset of the new segment
	var segAlign uint64
	loaded := false
	if s.Load {
		var note string
		seg, delta, segAlign, note = placeSegment(h, phdrs, uint64(len(out)))
		if note == "" && s.Segment != 0 && h.phnum+2 >= 0xffff {
			note = "too many program headers"
		}
		if note == "" {
			loaded = true
		} else {
			res.Note = note
		}
	}

	newSec := shdr{typ: uint32(s.Type), flags: uint64(s.Flags), size: s.Size, addralign: s.Align}
	if loaded {
		newSec.flags |= uint64(elf.SHF_ALLOC)
		extra := 1
		if s.Segment != 0 {
			extra = 2
		}
		nph := h.phnum + extra
		pad(seg)
		phOff := seg
		secOff := alignUp(phOff+uint64(nph)*phdrSize, s.Align)
		segEnd := secOff + s.Size
		load := phdr{typ: elf.PT_LOAD, flags: elf.PF_R, off: seg, vaddr: seg + delta, paddr: seg + delta,
			filesz: segEnd - seg, memsz: segEnd - seg, align: segAlign}
		var table []phdr
		lastLoad := -1
		for i := range phdrs {
			if phdrs[i].typ == elf.PT_LOAD {
				lastLoad = i
			}
		}
		for i, p := range phdrs {
			if p.typ == elf.PT_PHDR {
				p.off, p.vaddr, p.paddr = phOff, phOff+delta, phOff+delta
				p.filesz, p.memsz = uint64(nph)*phdrSize, uint64(nph)*phdrSize
			}
			table = append(table, p)
			if i == lastLoad {
				table = append(table, load)
			}
		}
		newSec.off, newSec.addr = secOff, secOff+delta
		if s.Segment != 0 {
			table = append(table, phdr{typ: s.Segment, flags: elf.PF_R, off: secOff, vaddr: secOff + delta,
				paddr: secOff + delta, filesz: s.Size, memsz: s.Size, align: max(s.SegmentAlign, 1)})
		}
		pad(segEnd)
		for i := range table {
			table[i].put(out[phOff+uint64(i)*phdrSize:], bo)
		}
		bo.PutUint64(out[32:], phOff)
		bo.PutUint16(out[56:], uint16(nph))
		res.Loaded = true
	} else {
		pad(alignUp(uint64(len(out)), s.Align))
		newSec.off = uint64(len(out))
		pad(newSec.off + s.Size)
	}
	res.Offset, res.Addr = newSec.off, newSec.addr
	data, err := s.Contents(newSec.addr)
	if err != nil {
		return nil, nil, err
	}
	if uint64(len(data)) != s.Size {
		return nil, nil, fmt.Errorf("elfedit: %s: contents are %d bytes, the section was laid out for %d", s.Name, len(data), s.Size)
	}
	copy(out[newSec.off:], data)

	// The section name table grows by the new name; its old bytes stay
	// where they were, unreferenced.
	newNames := append(append([]byte(nil), names...), s.Name...)
	newNames = append(newNames, 0)
	newSec.name = uint32(len(names))
	strtab.off = uint64(len(out))
	strtab.size = uint64(len(newNames))
	out = append(out, newNames...)
	shdrs[h.shstrnd] = strtab
	shdrs = append(shdrs, newSec)

	pad(alignUp(uint64(len(out)), 8))
	shoff := uint64(len(out))
	pad(shoff + uint64(len(shdrs))*shdrSize)
	for i := range shdrs {
		shdrs[i].put(out[shoff+uint64(i)*shdrSize:], bo)
	}
	bo.PutUint64(out[40:], shoff)
	bo.PutUint16(out[60:], uint16(len(shdrs)))
	if len(shdrs) >= int(elf.SHN_LORESERVE) {
		return nil, nil, fmt.Errorf("elfedit: too many sections (%d)", len(shdrs))
	}
	return out, res, nil
}

// placeSegment chooses the file offset of a new PT_LOAD segment: past the
// end of the file and far enough that, at the first segment's
// address-offset difference, its addresses follow every existing
// segment's, aligned to the largest PT_LOAD alignment. It returns a note
// instead when no segment can be added.
func placeSegment(h *header, phdrs []phdr, fileSize uint64) (off, delta, align uint64, note string) {
	if h.typ != elf.ET_EXEC && h.typ != elf.ET_DYN {
		return 0, 0, 0, fmt.Sprintf("a %v file is not loaded by segments", h.typ)
	}
	first := -1
	var end uint64
	align = 0x1000
	for i, p := range phdrs {
		if p.typ != elf.PT_LOAD {
			continue
		}
		if first < 0 || p.vaddr < phdrs[first].vaddr {
			first = i
		}
		end = max(end, p.vaddr+p.memsz)
		if p.align > align && p.align <= 1<<21 {
			align = p.align
		}
	}
	if first < 0 {
		return 0, 0, 0, "the file has no PT_LOAD segment"
	}
	f := phdrs[first]
	if f.vaddr < f.off || (f.vaddr-f.off)%align != 0 {
		return 0, 0, 0, fmt.Sprintf("the first segment's address %#x and offset %#x are not %#x-congruent", f.vaddr, f.off, align)
	}
	delta = f.vaddr - f.off
	need := fileSize
	if end-delta > need {
		need = end - delta
	}
	off = alignUp(need, align)
	if off-fileSize > MaxPadding {
		return 0, 0, 0, fmt.Sprintf("placing a segment after the last one's memory needs %d bytes of padding (limit %d)", off-fileSize, MaxPadding)
	}
	return off, delta, align, ""
}
