package corefile

import (
	"debug/elf"
	"encoding/binary"

	"github.com/rewindstack/rewind/internal/readat"
)

// Truncated reports whether the core file is shorter than its PT_LOAD
// and PT_NOTE segments promise (a dump cut short by a full disk or a size limit):
// want is the size they need, have the file's size. Memory beyond the end
// reads as not dumped.
func (c *Core) Truncated() (want, have int64, truncated bool) {
	if c.wantSize > uint64(c.size) {
		return int64(min(c.wantSize, 1<<62)), c.size, true
	}
	return int64(c.wantSize), c.size, false
}

// NotesCut describes what a core cut short inside its notes lacks (gcore
// writes the notes after the memory, so a truncated gcore core loses them
// first): the file offset where the whole notes end, and the notes the
// rest would have held. ok is false when every note was read whole. The
// threads whose registers were read are in Threads; those noted after the
// cut are missing, and how many they were is not known.
func (c *Core) NotesCut() (at uint64, missing []string, ok bool) {
	if c.notesCut == 0 {
		return 0, nil, false
	}
	if !c.haveFile {
		missing = append(missing, "the file mappings (NT_FILE)")
	}
	if !c.haveAuxv {
		missing = append(missing, "the auxiliary vector (NT_AUXV)")
	}
	return c.notesCut, missing, true
}

// maxHeaderRead bounds what BuildIDs reads of each mapped object's
// headers from the core.
const maxHeaderRead = 64 << 10

// BuildIDs returns the build-id of each mapped file whose ELF headers and
// build-id note the core holds (kernel cores dump the first page of every
// ELF mapping by default, coredump_filter bit 4; gcore does too), keyed by
// the mapping's path. Only bytes dumped in the core are read, never the
// files on disk: the point is to identify those files.
func (c *Core) BuildIDs() map[string][]byte {
	out := map[string][]byte{}
	for i := range c.Mappings {
		m := &c.Mappings[i]
		if m.Offset != 0 || out[m.Path] != nil {
			continue
		}
		if id := c.buildIDAt(m.Start, m.End); id != nil {
			out[m.Path] = id
		}
	}
	return out
}

// readDumped reads p at addr from the core's own bytes only.
func (c *Core) readDumped(addr uint64, p []byte) bool {
	si, _ := c.segmentAt(addr)
	if si < 0 {
		return false
	}
	s := &c.segs[si]
	rel := addr - s.vaddr
	if rel > s.filesz || uint64(len(p)) > s.filesz-rel {
		return false
	}
	return readat.Full(c.r, p, s.off+rel) == nil
}

// buildIDAt parses the ELF header dumped at start (the mapping of file
// offset 0, ending at end) and returns the GNU build-id note's
// descriptor, or nil.
func (c *Core) buildIDAt(start, end uint64) []byte {
	var hdr [64]byte
	if end-start < 64 || !c.readDumped(start, hdr[:]) {
		return nil
	}
	return parseBuildID(hdr[:], func(off uint64, p []byte) bool {
		if off >= end-start || uint64(len(p)) > end-start-off {
			return false
		}
		return c.readDumped(start+off, p)
	})
}

// parseBuildID reads the build-id of the ELF image whose first 64 bytes
// are hdr, reading further bytes by file offset through read (the first
// mapping of an ELF file maps its leading file bytes unchanged). It
// returns nil for anything malformed.
func parseBuildID(hdr []byte, read func(off uint64, p []byte) bool) []byte {
	if len(hdr) < 64 || string(hdr[:4]) != elf.ELFMAG {
		return nil
	}
	var bo binary.ByteOrder
	switch elf.Data(hdr[elf.EI_DATA]) {
	case elf.ELFDATA2LSB:
		bo = binary.LittleEndian
	case elf.ELFDATA2MSB:
		bo = binary.BigEndian
	default:
		return nil
	}
	var phoff, phentsize, phnum uint64
	is64 := elf.Class(hdr[elf.EI_CLASS]) == elf.ELFCLASS64
	if is64 {
		phoff, phentsize, phnum = bo.Uint64(hdr[32:]), uint64(bo.Uint16(hdr[54:])), uint64(bo.Uint16(hdr[56:]))
	} else if elf.Class(hdr[elf.EI_CLASS]) == elf.ELFCLASS32 {
		phoff, phentsize, phnum = uint64(bo.Uint32(hdr[28:])), uint64(bo.Uint16(hdr[42:])), uint64(bo.Uint16(hdr[44:]))
	} else {
		return nil
	}
	need := uint64(56)
	if !is64 {
		need = 32
	}
	if phentsize < need || phnum == 0 || phnum*phentsize > maxHeaderRead {
		return nil
	}
	ph := make([]byte, phnum*phentsize)
	if !read(phoff, ph) {
		return nil
	}
	for i := uint64(0); i < phnum; i++ {
		p := ph[i*phentsize:]
		var typ uint32
		var off, size, align uint64
		if is64 {
			typ, off, size, align = bo.Uint32(p), bo.Uint64(p[8:]), bo.Uint64(p[32:]), bo.Uint64(p[48:])
		} else {
			typ, off, size, align = bo.Uint32(p), uint64(bo.Uint32(p[4:])), uint64(bo.Uint32(p[16:])), uint64(bo.Uint32(p[28:]))
		}
		if elf.ProgType(typ) != elf.PT_NOTE || size == 0 || size > maxHeaderRead {
			continue
		}
		notes := make([]byte, size)
		if !read(off, notes) {
			continue
		}
		if id := gnuBuildIDNote(notes, bo, align); id != nil {
			return id
		}
	}
	return nil
}

// gnuBuildIDNote returns a copy of the NT_GNU_BUILD_ID descriptor in a
// note area, or nil. Names and descriptors are padded to 4 bytes, or to 8
// when the area is 8-aligned.
func gnuBuildIDNote(b []byte, bo binary.ByteOrder, align uint64) []byte {
	pad := uint64(4)
	if align == 8 {
		pad = 8
	}
	up := func(n uint64) uint64 { return (n + pad - 1) &^ (pad - 1) }
	for len(b) >= 12 {
		namesz, descsz, typ := uint64(bo.Uint32(b)), uint64(bo.Uint32(b[4:])), bo.Uint32(b[8:])
		rest := uint64(len(b) - 12)
		if namesz > rest || up(namesz) > rest || descsz > rest-up(namesz) {
			return nil
		}
		name := b[12 : 12+namesz]
		desc := b[12+up(namesz) : 12+up(namesz)+descsz]
		if typ == 3 && namesz == 4 && string(name) == "GNU\x00" && descsz > 0 && descsz <= 64 {
			return append([]byte(nil), desc...)
		}
		next := 12 + up(namesz) + up(descsz)
		if next > uint64(len(b)) {
			return nil
		}
		b = b[next:]
	}
	return nil
}

// ExeMapped reports whether an NT_FILE entry names the executable (Exe):
// then a user-given executable replaces that file; otherwise (qemu-user
// cores have no NT_FILE) Target places it by AT_ENTRY.
func (c *Core) ExeMapped() bool {
	for i := range c.Mappings {
		if c.Mappings[i].Path == c.Exe {
			return true
		}
	}
	return false
}
