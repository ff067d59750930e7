package goruntime

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
)

// findAllgs locates runtime.allgs in a binary without a symbol table. The
// runtime's forEachG locks allglock and ranges over allgs: its code loads
// the slice's pointer and length with two RIP-relative 64-bit moves from
// adjacent words (amd64: REX.W 8B /r, ModRM mod=00 rm=101). The first word
// of the first such pair is allgs; its length word is what the dump reads
// (allglen equals it while the process is stopped).
func (l *Layout) findAllgs(ef *elf.File) error {
	if ef.Machine != elf.EM_X86_64 {
		return fmt.Errorf("%w: finding runtime.allgs without symbols is implemented for amd64 only", ErrUnsupported)
	}
	lo, hi, ok := Function(ef, "runtime.forEachG")
	if !ok || hi <= lo || hi-lo > 4096 {
		return fmt.Errorf("%w: no symbol runtime.allgs and no runtime.forEachG in the pcln table", ErrUnsupported)
	}
	code := make([]byte, hi-lo)
	if !readVaddr(ef, lo, code) {
		return fmt.Errorf("%w: runtime.forEachG's code at %#x is not in the file", ErrUnsupported, lo)
	}
	targets := ripLoads(code, lo)
	for i := 0; i+1 < len(targets); i++ {
		if targets[i+1] == targets[i]+8 {
			l.AllGs = targets[i]
			return nil
		}
	}
	return fmt.Errorf("%w: runtime.forEachG at %#x does not load a slice header as expected", ErrUnsupported, lo)
}

// ripLoads returns the targets of the RIP-relative 64-bit loads
// (MOVQ disp32(RIP), reg) in code linked at addr, in order.
func ripLoads(code []byte, addr uint64) []uint64 {
	var out []uint64
	for i := 0; i+7 <= len(code); i++ {
		rex := code[i]
		if rex&0xf8 != 0x48 || code[i+1] != 0x8b || code[i+2]&0xc7 != 0x05 {
			continue
		}
		disp := int32(binary.LittleEndian.Uint32(code[i+3:]))
		out = append(out, addr+uint64(i)+7+uint64(int64(disp)))
	}
	return out
}
