package regs

// The x86-64 ucontext_t: what glibc's getcontext and swapcontext save (a
// fiber's context) and what the kernel puts in a signal frame (the
// interrupted code's registers), one layout for both
// (sysdeps/unix/sysv/linux/x86_64/sys/ucontext.h, the kernel's struct
// ucontext and struct sigcontext). uc_mcontext.gregs holds the general
// registers in the order REG_R8..REG_R15, REG_RDI, REG_RSI, REG_RBP,
// REG_RBX, REG_RDX, REG_RAX, REG_RCX, REG_RSP, REG_RIP, then eflags and
// the rest (23 slots); uc_mcontext.fpregs follows, pointing at the FPU
// state (glibc's getcontext points it at the structure's own
// __fpregs_mem).
const (
	// AMD64UContextGregs is the byte offset of uc_mcontext.gregs.
	AMD64UContextGregs = 40
	// AMD64UContextFPRegs is the byte offset of uc_mcontext.fpregs.
	AMD64UContextFPRegs = 224
	// AMD64UContextFPRegsMem is the byte offset of glibc's __fpregs_mem.
	AMD64UContextFPRegsMem = 424
)

// AMD64Gregs are the DWARF numbers of gregs' first slots, REG_R8 to
// REG_RIP.
var AMD64Gregs = [17]int{8, 9, 10, 11, 12, 13, 14, 15,
	AMD64RDI, AMD64RSI, AMD64RBP, AMD64RBX,
	AMD64RDX, AMD64RAX, AMD64RCX, AMD64RSP, AMD64RIP}

// AMD64UContextOffset returns the byte offset in an x86-64 ucontext_t of
// the saved value of DWARF register r; false for a register gregs does
// not hold.
func AMD64UContextOffset(r int) (uint64, bool) {
	for i, n := range AMD64Gregs {
		if n == r {
			return AMD64UContextGregs + uint64(i)*8, true
		}
	}
	return 0, false
}
