package goruntime

import (
	"debug/elf"
	"encoding/binary"
)

// tlsG finds where an amd64 Go program keeps the running goroutine's g
// relative to the thread pointer (the fs base), as its own code reads it:
// runtime.morestack begins with get_tls and a load of g (asm_amd64.s),
// which the linker writes as one of
//
//	MOVQ %fs:disp32, reg                       64 REX.W 8B /r (mod 00, rm 100, SIB 25) disp32
//	MOVQ $imm32, %rcx; MOVQ %fs:(%rcx), reg    REX.W C7 C1 imm32; 64 REX.W 8B /r (mod 00, rm 001)
//
// the first for the local-exec model of a statically linked or internally
// linked program, the second for an internally linked PIE. Otherwise (the
// initial-exec model of external linking, which loads the offset from the
// GOT) the offset is taken from the program's TLS segment: runtime.tlsg's
// place in it, the segment ending at the thread pointer (x86-64's TLS
// variant II) in an executable. A shared library's offset is chosen by the
// dynamic linker at run time: none then.
func tlsG(ef *elf.File, syms map[string]elf.Symbol) (int64, bool) {
	if ef.Machine != elf.EM_X86_64 {
		return 0, false
	}
	var code [16]byte
	if morestackCode(ef, syms, code[:]) {
		if off, ok := decodeTLSLoad(code[:]); ok {
			return off, true
		}
	}
	s, ok := syms["runtime.tlsg"]
	if !ok || elf.ST_TYPE(s.Info) != elf.STT_TLS {
		return 0, false
	}
	exec := ef.Type == elf.ET_EXEC
	var tls *elf.Prog
	for _, p := range ef.Progs {
		switch p.Type {
		case elf.PT_INTERP:
			exec = true // a PIE
		case elf.PT_TLS:
			tls = p
		}
	}
	if !exec || tls == nil {
		return 0, false
	}
	align := max(tls.Align, 1)
	size := (tls.Memsz + align - 1) / align * align
	return int64(s.Value) - int64(size), true
}

// decodeTLSLoad decodes the load of g at the start of runtime.morestack
// (see tlsG).
func decodeTLSLoad(c []byte) (int64, bool) {
	switch {
	case len(c) >= 9 && c[0] == 0x64 && c[1]&0xf8 == 0x48 && c[2] == 0x8b && c[3]&0xc7 == 0x04 && c[4] == 0x25:
		return int64(int32(binary.LittleEndian.Uint32(c[5:]))), true
	case len(c) >= 11 && c[0] == 0x48 && c[1] == 0xc7 && c[2] == 0xc1 &&
		c[7] == 0x64 && c[8]&0xf8 == 0x48 && c[9] == 0x8b && c[10]&0xc7 == 0x01:
		return int64(int32(binary.LittleEndian.Uint32(c[3:]))), true
	}
	return 0, false
}

// morestackCode fills code with the start of runtime.morestack.
func morestackCode(ef *elf.File, syms map[string]elf.Symbol, code []byte) bool {
	lo := uint64(0)
	for _, n := range []string{"runtime.morestack.abi0", "runtime.morestack"} {
		if s, ok := syms[n]; ok && s.Value != 0 {
			lo = s.Value
			break
		}
	}
	if lo == 0 {
		if a, _, ok := Function(ef, "runtime.morestack"); ok {
			lo = a
		}
	}
	return lo != 0 && readVaddr(ef, lo, code)
}

// codeAgrees checks offsets of g against the stores amd64's
// runtime.morestack begins with (asm_amd64.s: g.m into BX, then g.sched's
// pc, sp and bp from DI, the g):
//
//	MOVQ m(DI), BX       48 8B 5F disp8
//	MOVQ AX, pc(DI)      48 89 47 disp8  (the first such store)
//	MOVQ AX, sp(DI)      48 89 47 disp8  (the second)
//	MOVQ BP, bp(DI)      48 89 6F disp8
//
// It reports false when one it finds disagrees; code it does not know (an
// older or newer morestack, another architecture) does not refute them.
func codeAgrees(ef *elf.File, syms map[string]elf.Symbol, g *GOffsets) bool {
	if ef.Machine != elf.EM_X86_64 {
		return true
	}
	var code [64]byte
	if !morestackCode(ef, syms, code[:]) {
		return true
	}
	stores := 0
	for i := 0; i+4 <= len(code); i++ {
		if code[i] != 0x48 {
			continue
		}
		op, modrm, disp := code[i+1], code[i+2], int(code[i+3])
		switch {
		case op == 0x8b && modrm == 0x5f && disp != g.M:
			return false
		case op == 0x89 && modrm == 0x47:
			if want := []int{g.SchedPC, g.SchedSP}; stores < 2 && disp != want[stores] {
				return false
			}
			stores++
		case op == 0x89 && modrm == 0x6f && disp != g.SchedBP:
			return false
		}
	}
	return true
}
