package elfobj

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
)

// pltTable names the PLT entries of one object: symbol tables do not cover
// the stubs, so a sample in one would otherwise be "[unknown]". Names are
// "sym@plt" as objdump and perf print them, "*ABS*+0xADDR@plt" for an
// IRELATIVE slot.
type pltTable struct {
	ranges []pltRange
}

type pltRange struct {
	start, end uint64 // object addresses of the entries
	first      uint64 // address of entry 0
	size       uint64 // entry size
	names      []string
}

// lookup returns the name of the entry containing the object address.
func (t *pltTable) lookup(addr uint64) (string, bool) {
	if t == nil {
		return "", false
	}
	for _, r := range t.ranges {
		if addr >= r.start && addr < r.end && addr >= r.first {
			if i := (addr - r.first) / r.size; i < uint64(len(r.names)) && r.names[i] != "" {
				return r.names[i], true
			}
		}
	}
	return "", false
}

// PLTName names the PLT entry (the stub a call to a shared function goes
// through) that holds file virtual address vaddr, as objdump and perf
// print it: "sym@plt", or "*ABS*+0xADDR@plt" for an IRELATIVE slot.
// Symbol tables do not cover the stubs, so a frame in one would otherwise
// have no name. The entries are read on first use.
func (f *File) PLTName(vaddr uint64) (string, bool) {
	f.pltOnce.Do(func() {
		protect(func() error { // debug/elf may panic on a corrupt file
			f.plt = f.readPLT()
			return nil
		})
	})
	return f.plt.lookup(vaddr)
}

// readPLT reads the PLT entries of the object and names each after the
// relocation of the GOT slot it jumps through, as objdump does: on x86-64
// the slot is decoded from the entry's "jmp *slot(%rip)"; on arm64 the
// entries follow the .rela.plt relocations in order. It returns nil when
// the object has no PLT it can name.
func (file *File) readPLT() *pltTable {
	f := file.ef
	if f == nil {
		return nil
	}
	rela := f.Section(".rela.plt")
	if rela == nil || f.Class != elf.ELFCLASS64 || rela.Type == elf.SHT_NOBITS {
		return nil
	}
	data, err := rela.Data()
	if err != nil {
		return nil
	}
	syms, _ := f.DynamicSymbols()
	var names []string
	bySlot := map[uint64]string{}
	for off := 0; off+24 <= len(data); off += 24 {
		r := data[off : off+24]
		slot := f.ByteOrder.Uint64(r)
		info := f.ByteOrder.Uint64(r[8:])
		addend := f.ByteOrder.Uint64(r[16:])
		name := fmt.Sprintf("*ABS*+%#x@plt", addend)
		if idx := int(info >> 32); idx > 0 && idx <= len(syms) {
			name = syms[idx-1].Name + "@plt"
		}
		names = append(names, name)
		bySlot[slot] = name
	}
	t := &pltTable{}
	switch f.Machine {
	case elf.EM_X86_64:
		for _, sec := range []string{".plt", ".plt.sec"} {
			s := f.Section(sec)
			if s == nil || s.Size < 16 || s.Type != elf.SHT_PROGBITS {
				continue
			}
			code, err := s.Data()
			if err != nil {
				continue
			}
			r := pltRange{start: s.Addr, end: s.Addr + s.Size, first: s.Addr, size: 16}
			for e := 0; e+16 <= len(code); e += 16 {
				r.names = append(r.names, x86Slot(code[e:e+16], s.Addr+uint64(e), bySlot))
			}
			t.ranges = append(t.ranges, r)
		}
	case elf.EM_AARCH64:
		if s := f.Section(".plt"); s != nil && s.Size > 32 {
			t.ranges = append(t.ranges, pltRange{start: s.Addr, end: s.Addr + s.Size, first: s.Addr + 32, size: 16, names: names})
		}
	}
	return t
}

// x86Slot names a 16-byte x86-64 PLT entry at addr by the GOT slot its
// indirect jump ("ff 25 disp32", possibly after endbr64 and a bnd prefix)
// reads; "" when the entry has none (PLT0).
func x86Slot(entry []byte, addr uint64, bySlot map[uint64]string) string {
	for i := 0; i+6 <= len(entry) && i <= 6; i++ {
		if entry[i] == 0xff && entry[i+1] == 0x25 {
			disp := int32(binary.LittleEndian.Uint32(entry[i+2:]))
			slot := addr + uint64(i+6) + uint64(int64(disp))
			return bySlot[slot]
		}
	}
	return ""
}
