package live

import (
	"fmt"
	"runtime"

	"github.com/rewindstack/rewind/regs"
)

// hostArch is the architecture of the register sets ptrace returns: this
// program's own (rewind captures processes of its own architecture).
var hostArch = HostArch

// userRegsWords bounds the size of the kernel's register set in 64-bit
// words on every architecture (regs.UserRegsWords gives the exact one).
const userRegsWords = 64

// convertRegs turns the NT_PRSTATUS contents (n bytes of buf) into a
// register set.
func convertRegs(buf []uint64, n int) (regs.Regs, error) {
	want := regs.UserRegsWords(hostArch)
	if want == 0 {
		return regs.Regs{}, fmt.Errorf("%w on %s", ErrUnsupported, runtime.GOARCH)
	}
	if n != want*8 {
		return regs.Regs{}, kindErrorf(ErrUnsupported, "live: %d-byte register set: 32-bit processes are not supported", n)
	}
	return regs.FromUser(hostArch, buf[:want])
}
