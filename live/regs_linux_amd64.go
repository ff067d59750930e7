package live

import (
	"github.com/rewindstack/rewind/regs"
)

// userRegsWords is the size of struct user_regs_struct in 64-bit words.
const userRegsWords = 27

// userRegsToDWARF maps DWARF register numbers 0..16 (rax, rdx, rcx, rbx,
// rsi, rdi, rbp, rsp, r8..r15, rip) to their index in user_regs_struct
// (r15, r14, r13, r12, rbp, rbx, r11, r10, r9, r8, rax, rcx, rdx, rsi,
// rdi, orig_rax, rip, cs, eflags, rsp, ss, fs_base, gs_base, ds, es, fs,
// gs; see arch/x86/include/asm/user_64.h).
var userRegsToDWARF = [17]int{
	10, 12, 11, 5, 13, 14, 4, 19, // rax rdx rcx rbx rsi rdi rbp rsp
	9, 8, 7, 6, 3, 2, 1, 0, // r8 .. r15
	16, // rip
}

// convertRegs turns the NT_PRSTATUS contents (n bytes of buf) into a
// register set.
func convertRegs(buf []uint64, n int) (regs.Regs, error) {
	if n != userRegsWords*8 {
		return regs.Regs{}, kindErrorf(ErrUnsupported, "live: %d-byte register set: 32-bit processes are not supported", n)
	}
	r := regs.New(regs.AMD64)
	for dw, i := range userRegsToDWARF {
		r.Set(dw, buf[i])
	}
	return r, nil
}
