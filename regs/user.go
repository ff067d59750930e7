package regs

import "fmt"

// The kernel's general register sets, as PTRACE_GETREGSET(NT_PRSTATUS)
// returns them and NT_PRSTATUS notes of core files hold them: struct
// user_regs_struct on amd64 (arch/x86/include/asm/user_64.h), struct
// user_pt_regs on arm64 (x0..x30, sp, pc, pstate).

// amd64UserRegs maps user_regs_struct slots to DWARF register numbers
// (-1: not a DWARF general register). The slots are r15 r14 r13 r12 rbp
// rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags rsp ss
// fs_base gs_base ds es fs gs.
var amd64UserRegs = [...]int{
	15, 14, 13, 12, AMD64RBP, AMD64RBX, 11, 10, 9, 8,
	AMD64RAX, AMD64RCX, AMD64RDX, AMD64RSI, AMD64RDI,
	-1, AMD64RIP, -1, -1, AMD64RSP, -1,
	-1, -1, -1, -1, -1, -1,
}

// AMD64UserFSBase is the slot of fs_base (the thread pointer) in amd64's
// user_regs_struct.
const AMD64UserFSBase = 21

// ThreadPointer returns the thread pointer (the TCB address: fs_base on
// amd64) from the kernel's register set of arch, 0 when the set does not
// hold it (arm64 keeps TPIDR_EL0 in a register set of its own).
func ThreadPointer(arch Arch, words []uint64) uint64 {
	if arch == AMD64 && len(words) > AMD64UserFSBase {
		return words[AMD64UserFSBase]
	}
	return 0
}

// UserRegsWords is the number of 64-bit words in arch's kernel register
// set (0 for an architecture rewind does not unwind).
func UserRegsWords(arch Arch) int {
	switch arch {
	case AMD64:
		return len(amd64UserRegs)
	case ARM64:
		return 34
	}
	return 0
}

// FromUser converts the kernel's register set of arch, as 64-bit words,
// into a DWARF-numbered register set. It needs at least UserRegsWords
// words.
func FromUser(arch Arch, words []uint64) (Regs, error) {
	n := UserRegsWords(arch)
	if n == 0 {
		return Regs{}, fmt.Errorf("register sets of %s are not supported", arch)
	}
	if len(words) < n {
		return Regs{}, fmt.Errorf("%s register set: %d words, want %d", arch, len(words), n)
	}
	r := New(arch)
	switch arch {
	case AMD64:
		for slot, dw := range amd64UserRegs {
			if dw >= 0 {
				r.Set(dw, words[slot])
			}
		}
	case ARM64:
		for i := 0; i <= ARM64PC; i++ {
			r.Set(i, words[i])
		}
	}
	return r, nil
}
