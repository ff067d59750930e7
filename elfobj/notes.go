package elfobj

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
)

// ntGNUBuildID is the note type of the GNU build-id note.
const ntGNUBuildID = 3

// maxNoteBytes bounds how much of a note segment or section is read when
// looking for the build-id; real note areas are a few hundred bytes.
const maxNoteBytes = 1 << 20

// readBuildID sets f.BuildID from the first NT_GNU_BUILD_ID note in a
// PT_NOTE segment, or else in a note section (preferring
// .note.gnu.build-id). A malformed note area is skipped, not an error:
// the build-id is an optional convenience.
func (f *File) readBuildID() error {
	for _, p := range f.ef.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz == 0 || p.Filesz > maxNoteBytes {
			continue
		}
		data, err := f.readAt(p.Off, p.Filesz)
		if err != nil {
			continue
		}
		if id := findGNUNote(data, f.ByteOrder, ntGNUBuildID, p.Align); id != nil {
			f.BuildID = id
			return nil
		}
	}
	try := func(pred func(*secInfo) bool) bool {
		for i := range f.secs {
			s := &f.secs[i]
			if s.typ != elf.SHT_NOTE || s.comp || s.size == 0 || s.size > maxNoteBytes || !pred(s) {
				continue
			}
			data, err := f.readAt(s.offset, s.size)
			if err != nil {
				continue
			}
			if id := findGNUNote(data, f.ByteOrder, ntGNUBuildID, s.elfSec.Addralign); id != nil {
				f.BuildID = id
				return true
			}
		}
		return false
	}
	if !try(func(s *secInfo) bool { return s.name == ".note.gnu.build-id" }) {
		try(func(s *secInfo) bool { return true })
	}
	return nil
}

// findGNUNote returns a copy of the descriptor of the first note named "GNU"
// with type typ in a note area, or nil. The descriptor and the next note
// start at 4-byte boundaries, or 8-byte ones when the note area is 8-byte
// aligned (as PT_NOTE segments holding .note.gnu.property are).
func findGNUNote(data []byte, bo binary.ByteOrder, typ uint32, areaAlign uint64) []byte {
	mask := uint64(3)
	if areaAlign == 8 {
		mask = 7
	}
	end := uint64(len(data))
	for off := uint64(0); end-off >= 12; {
		namesz := uint64(bo.Uint32(data[off:]))
		descsz := uint64(bo.Uint32(data[off+4:]))
		ntype := bo.Uint32(data[off+8:])
		nameOff := off + 12
		if namesz > end-nameOff {
			return nil
		}
		descOff := (nameOff + namesz + mask) &^ mask
		if descOff > end || descsz > end-descOff {
			return nil
		}
		name := bytes.TrimRight(data[nameOff:nameOff+namesz], "\x00")
		if ntype == typ && descsz > 0 && string(name) == "GNU" {
			return bytes.Clone(data[descOff : descOff+descsz])
		}
		next := (descOff + descsz + mask) &^ mask
		if next <= off || next > end {
			return nil
		}
		off = next
	}
	return nil
}

// align4 rounds n up to a multiple of 4.
func align4(n uint64) uint64 { return (n + 3) &^ 3 }

// readDebugLink parses .gnu_debuglink: a NUL-terminated file name, padding to
// a 4-byte boundary, then a CRC-32 in the file's byte order.
func (f *File) readDebugLink() error {
	for i := range f.secs {
		s := &f.secs[i]
		if s.name != ".gnu_debuglink" || s.typ == elf.SHT_NOBITS || s.comp {
			continue
		}
		if s.size > 4096 {
			return f.formatf(s.name, 0, nil, "size %d is implausible", s.size)
		}
		data, err := f.readAt(s.offset, s.size)
		if err != nil {
			return f.formatf(s.name, 0, err, "reading its contents")
		}
		nul := bytes.IndexByte(data, 0)
		if nul < 0 {
			return f.formatf(s.name, 0, nil, "file name is not NUL-terminated")
		}
		crcOff := align4(uint64(nul) + 1)
		if crcOff+4 > uint64(len(data)) {
			return f.formatf(s.name, crcOff, nil, "missing CRC")
		}
		f.DebugLink = string(data[:nul])
		f.DebugLinkCRC = f.ByteOrder.Uint32(data[crcOff:])
		return nil
	}
	return nil
}
