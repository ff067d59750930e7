package elfobj

import (
	"debug/elf"

	"github.com/rewindstack/rewind/internal/readat"
)

// pageSizes are the page sizes a mapping's file offset may be aligned to
// (4 KiB everywhere; 16 KiB and 64 KiB arm64 kernels).
var pageSizes = [...]uint64{4 << 10, 16 << 10, 64 << 10}

// Bias returns the load bias (runtime address = file vaddr + bias) of a
// mapping of this file that starts at runtime address mapStart and maps file
// offset mapOffset, as listed in /proc/PID/maps or a core's NT_FILE note.
//
// The PT_LOAD that produced the mapping is the one whose offset rounded down
// to a page boundary equals mapOffset; failing that (a mapping split by a
// later mprotect, for example), the last PT_LOAD whose page-aligned file
// range contains mapOffset. It is an error if no PT_LOAD covers mapOffset.
//
// Two PT_LOADs can share a file page: typically the read-only segment before
// the RELRO/data segment, whose first page the dynamic loader maps a second
// time. A mapping of that page offset is then ambiguous; Bias prefers an
// executable segment and otherwise the earlier one. Callers should therefore
// take a file's bias from its executable mapping or its lowest-offset
// mapping, not from an arbitrary one. For ET_EXEC files (fixed-address
// executables) the bias is always 0.
func (f *File) Bias(mapStart, mapOffset uint64) (uint64, error) {
	best := -1
	for _, ps := range pageSizes {
		for i, s := range f.Loads {
			if s.Filesz == 0 && s.Memsz == 0 {
				continue
			}
			if s.Offset&^(ps-1) != mapOffset || (ps != pageSizes[0] && s.Align < ps) {
				continue
			}
			if best < 0 || (s.Flags&elf.PF_X != 0 && f.Loads[best].Flags&elf.PF_X == 0) {
				best = i
			}
		}
		if best >= 0 {
			break
		}
	}
	if best < 0 {
		for i, s := range f.Loads {
			start := s.Offset &^ (pageSizes[0] - 1)
			end := s.Offset + max(s.Filesz, 1)
			if end < s.Offset {
				end = ^uint64(0)
			}
			if mapOffset >= start && mapOffset < end {
				best = i
			}
		}
	}
	if best < 0 {
		return 0, f.errorf("no PT_LOAD segment covers file offset %#x", mapOffset)
	}
	if f.Type == elf.ET_EXEC {
		return 0, nil
	}
	s := f.Loads[best]
	// The file vaddr of the mapping's first byte; both subtractions wrap
	// harmlessly in uint64 arithmetic when mapOffset < s.Offset.
	vaddr := s.Vaddr + mapOffset - s.Offset
	return mapStart - vaddr, nil
}

// ReadVaddr reads the file bytes backing the virtual address range
// [vaddr, vaddr+len(p)) from the PT_LOAD segments' file contents; bytes
// beyond a segment's Filesz (but within Memsz) read as zero. The range may
// span adjacent segments. It is meant for reading code (to recognise signal
// trampolines, say) when a memory snapshot lacks file-backed text.
func (f *File) ReadVaddr(vaddr uint64, p []byte) error {
	for len(p) > 0 {
		seg := -1
		for i, s := range f.Loads {
			if vaddr >= s.Vaddr && vaddr-s.Vaddr < s.Memsz {
				seg = i
				break
			}
		}
		if seg < 0 {
			return f.errorf("vaddr %#x: not in any PT_LOAD segment", vaddr)
		}
		s := f.Loads[seg]
		rel := vaddr - s.Vaddr
		n := uint64(len(p))
		if avail := s.Memsz - rel; n > avail {
			n = avail
		}
		chunk := p[:n]
		if rel < s.Filesz {
			fn := min(n, s.Filesz-rel)
			off := s.Offset + rel
			if off < s.Offset {
				return f.errorf("vaddr %#x: segment offset overflows", vaddr)
			}
			if f.size >= 0 && (off > uint64(f.size) || fn > uint64(f.size)-off) {
				return f.errorf("vaddr %#x: offset %#x: %d bytes: %v (file size %d)", vaddr, off, fn, errShort, f.size)
			}
			if err := readat.Full(f.r, chunk[:fn], off); err != nil {
				return f.errorf("vaddr %#x: offset %#x: %v", vaddr, off, err)
			}
			clear(chunk[fn:])
		} else {
			clear(chunk)
		}
		p = p[n:]
		vaddr += n
		if vaddr == 0 && len(p) > 0 {
			return f.errorf("vaddr range wraps around the address space")
		}
	}
	return nil
}
