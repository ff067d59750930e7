package sframe

import (
	"debug/elf"
	"errors"
	"fmt"
)

// ErrNoSection is returned by FromELF for a file without the section.
var ErrNoSection = errors.New("no .sframe section")

// FromELF reads and parses the named SFrame section ("" means ".sframe") of
// an ELF file. Errors name the file by path.
//
// In a relocatable object (ET_REL) the function start addresses are filled
// in by relocations. With relocate set, FromELF applies the section's RELA
// relocations first, with the object's sections at address 0, as readelf
// 2.46 and later do before dumping; without it the stored bytes are used,
// as readelf 2.40 to 2.45 show them. Only the PC-relative and absolute
// relocations that assemblers emit for .sframe are supported (x86-64,
// AArch64, s390x).
func FromELF(f *elf.File, path, name string, relocate bool) (*Section, error) {
	if name == "" {
		name = ".sframe"
	}
	sec := f.Section(name)
	if sec == nil || sec.Type == elf.SHT_NOBITS {
		return nil, fmt.Errorf("sframe: %s: %w", path, ErrNoSection)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("sframe: %s %s: %w", path, name, err)
	}
	if relocate && f.Type == elf.ET_REL {
		if err := applyRelocations(f, sec, data); err != nil {
			return nil, fmt.Errorf("sframe: %s %s: %w", path, name, err)
		}
	}
	return Parse(data, sec.Addr, path+" "+name)
}

// applyRelocations applies the RELA relocations that target sec to data.
func applyRelocations(f *elf.File, sec *elf.Section, data []byte) error {
	var idx uint32
	for i, s := range f.Sections {
		if s == sec {
			idx = uint32(i)
		}
	}
	syms, err := f.Symbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return err
	}
	for _, rs := range f.Sections {
		if rs.Type != elf.SHT_RELA || rs.Info != idx {
			continue
		}
		if f.Class != elf.ELFCLASS64 {
			return fmt.Errorf("%s: 32-bit relocations are not supported", rs.Name)
		}
		b, err := rs.Data()
		if err != nil {
			return err
		}
		for off := 0; off+24 <= len(b); off += 24 {
			r := b[off:]
			where := f.ByteOrder.Uint64(r)
			info := f.ByteOrder.Uint64(r[8:])
			addend := int64(f.ByteOrder.Uint64(r[16:]))
			symIdx, typ := info>>32, uint32(info)
			var s uint64
			if symIdx > 0 {
				// debug/elf drops the null symbol: index i is syms[i-1].
				if int(symIdx) > len(syms) {
					return fmt.Errorf("%s: relocation %d: symbol %d out of range", rs.Name, off/24, symIdx)
				}
				s = syms[symIdx-1].Value
			}
			size, pcrel, err := relocKind(f.Machine, typ)
			if err != nil {
				return fmt.Errorf("%s: relocation %d: %w", rs.Name, off/24, err)
			}
			if size == 0 {
				continue
			}
			if where+uint64(size) > uint64(len(data)) {
				return fmt.Errorf("%s: relocation %d at %#x is outside the section", rs.Name, off/24, where)
			}
			v := s + uint64(addend)
			if pcrel {
				v -= sec.Addr + where
			}
			if size == 4 {
				f.ByteOrder.PutUint32(data[where:], uint32(v))
			} else {
				f.ByteOrder.PutUint64(data[where:], v)
			}
		}
	}
	return nil
}

// relocKind returns the size of a relocation's field and whether it is
// PC-relative; size 0 means a relocation to ignore (R_*_NONE).
func relocKind(m elf.Machine, typ uint32) (size int, pcrel bool, err error) {
	switch m {
	case elf.EM_X86_64:
		switch elf.R_X86_64(typ) {
		case elf.R_X86_64_NONE:
			return 0, false, nil
		case elf.R_X86_64_PC32:
			return 4, true, nil
		case elf.R_X86_64_PC64:
			return 8, true, nil
		case elf.R_X86_64_32, elf.R_X86_64_32S:
			return 4, false, nil
		case elf.R_X86_64_64:
			return 8, false, nil
		}
	case elf.EM_AARCH64:
		switch elf.R_AARCH64(typ) {
		case elf.R_AARCH64_NONE:
			return 0, false, nil
		case elf.R_AARCH64_PREL32:
			return 4, true, nil
		case elf.R_AARCH64_PREL64:
			return 8, true, nil
		case elf.R_AARCH64_ABS32:
			return 4, false, nil
		case elf.R_AARCH64_ABS64:
			return 8, false, nil
		}
	case elf.EM_S390:
		switch elf.R_390(typ) {
		case elf.R_390_NONE:
			return 0, false, nil
		case elf.R_390_PC32:
			return 4, true, nil
		case elf.R_390_PC64:
			return 8, true, nil
		case elf.R_390_32:
			return 4, false, nil
		case elf.R_390_64:
			return 8, false, nil
		}
	}
	return 0, false, fmt.Errorf("unsupported relocation type %d for %v", typ, m)
}
