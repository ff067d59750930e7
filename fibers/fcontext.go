package fibers

import (
	"errors"
	"fmt"

	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/target"
)

// ErrNoJumpFcontext is returned for an fcontext when no mapped object
// defines jump_fcontext, so the record's layout cannot be read from it.
var ErrNoJumpFcontext = errors.New("boost.context's jump_fcontext is in no mapped object with a symbol table: the fcontext record's layout is unknown")

// fcontextRecord derives the x86-64 fcontext record from the process's own
// jump_fcontext, which starts by making room for the record and storing
// the callee-saved registers into it:
//
//	lea  -N(%rsp),%rsp        N: the record's size (0x38 before boost 1.81,
//	                          0x40 with the stack-guard slot, more with CET)
//	mov  %r12,d(%rsp) … mov %rbp,d(%rsp)
//
// The record starts at the saved stack pointer (the fcontext_t); the
// return address into the function that switched away lies right above
// it, at N, and the resumed SP is N+8.
func fcontextRecord(tg *target.Target) (record, error) {
	code, err := jumpFcontextCode(tg)
	if err != nil {
		return record{}, err
	}
	n, stores, err := decodeJumpFcontext(code)
	if err != nil {
		return record{}, fmt.Errorf("jump_fcontext: %w", err)
	}
	rec := record{indirect: true, size: n + 8, spSlot: -1, spAdd: n + 8}
	for reg, off := range stores {
		if off+8 <= n {
			rec.slots = append(rec.slots, slot{reg: reg, off: off})
		}
	}
	rec.pcSlot = len(rec.slots)
	rec.slots = append(rec.slots, slot{reg: regs.AMD64RIP, off: n})
	return rec, nil
}

// jumpFcontextCode reads the first bytes of jump_fcontext from the object
// that defines it.
func jumpFcontextCode(tg *target.Target) ([]byte, error) {
	seen := map[*target.Module]bool{}
	for _, m := range tg.Space.Mappings() {
		if m.Module == nil || m.Module.File == nil || seen[m.Module] {
			continue
		}
		seen[m.Module] = true
		ext, err := m.Module.File.FunctionExtents([]string{"jump_fcontext"})
		if err != nil {
			continue
		}
		e, ok := ext["jump_fcontext"]
		if !ok {
			continue
		}
		code := make([]byte, min(e.End-e.Start, 96))
		if err := m.Module.File.ReadVaddr(e.Start, code); err != nil {
			return nil, fmt.Errorf("jump_fcontext in %s: %w", m.Module.Path, err)
		}
		return code, nil
	}
	return nil, ErrNoJumpFcontext
}

// decodeJumpFcontext finds the record size (the first lea d(%rsp),%rsp
// with a negative displacement) and the offsets of the callee-saved
// registers stored to d(%rsp) after it, by DWARF register number.
func decodeJumpFcontext(code []byte) (n uint64, stores map[int]uint64, err error) {
	stores = map[int]uint64{}
	// x86 register numbers (with REX.R) to DWARF numbers, callee-saved only.
	dwarf := map[int]int{3: regs.AMD64RBX, 5: regs.AMD64RBP, 12: 12, 13: 13, 14: 14, 15: 15}
	for i := 0; i < len(code); {
		b := code[i:]
		switch {
		case len(b) >= 4 && b[0] == 0xf3 && b[1] == 0x0f && b[2] == 0x1e && b[3] == 0xfa: // endbr64
			i += 4
			continue
		case n == 0 && len(b) >= 5 && b[0] == 0x48 && b[1] == 0x8d && b[2] == 0x64 && b[3] == 0x24: // lea disp8(%rsp),%rsp
			if d := int8(b[4]); d < 0 {
				n = uint64(-int64(d))
			}
			i += 5
			continue
		case n == 0 && len(b) >= 8 && b[0] == 0x48 && b[1] == 0x8d && b[2] == 0xa4 && b[3] == 0x24: // lea disp32(%rsp),%rsp
			if d := int32(uint32(b[4]) | uint32(b[5])<<8 | uint32(b[6])<<16 | uint32(b[7])<<24); d < 0 && d > -4096 {
				n = uint64(-int64(d))
			}
			i += 8
			continue
		case n != 0 && len(b) >= 5 && (b[0] == 0x48 || b[0] == 0x4c) && b[1] == 0x89 && b[2]&0xc7 == 0x44 && b[3] == 0x24: // mov %reg,disp8(%rsp)
			reg := int(b[2]>>3) & 7
			if b[0] == 0x4c {
				reg += 8
			}
			if dw, ok := dwarf[reg]; ok && int8(b[4]) >= 0 {
				stores[dw] = uint64(b[4])
			}
			i += 5
			continue
		case n != 0 && len(b) >= 3 && b[0] == 0x48 && b[1] == 0x89 && b[2] == 0xe0: // mov %rsp,%rax: the record is complete
			i = len(code)
			continue
		}
		if n == 0 {
			// Before the lea only endbr64 and CET's shadow-stack
			// bookkeeping may come; skip unknown bytes one at a time.
			i++
			continue
		}
		// Other instructions between the stores (stmxcsr, fnstcw, the
		// shadow-stack pointer's store): step over one byte and resync.
		i++
	}
	if n == 0 {
		return 0, nil, errors.New("no lea -N(%rsp),%rsp: not the x86-64 jump_fcontext rewind knows")
	}
	if _, ok := stores[regs.AMD64RBP]; !ok {
		return 0, nil, errors.New("no store of rbp into the record")
	}
	return n, stores, nil
}
