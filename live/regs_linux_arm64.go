package live

import (
	"github.com/rewindstack/rewind/regs"
)

// userRegsWords is the size of struct user_pt_regs (x0..x30, sp, pc,
// pstate) in 64-bit words.
const userRegsWords = 34

// convertRegs turns the NT_PRSTATUS contents (n bytes of buf) into a
// register set: x0..x30, sp and pc are DWARF registers 0..32 in order.
func convertRegs(buf []uint64, n int) (regs.Regs, error) {
	if n != userRegsWords*8 {
		return regs.Regs{}, kindErrorf(ErrUnsupported, "live: %d-byte register set: 32-bit processes are not supported", n)
	}
	r := regs.New(regs.ARM64)
	for i := 0; i <= regs.ARM64PC; i++ {
		r.Set(i, buf[i])
	}
	return r, nil
}
