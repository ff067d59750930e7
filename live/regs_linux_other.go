//go:build linux && !amd64 && !arm64

package live

import (
	"fmt"
	"runtime"

	"github.com/rewindstack/rewind/regs"
)

const userRegsWords = 64

func convertRegs(buf []uint64, n int) (regs.Regs, error) {
	return regs.Regs{}, fmt.Errorf("%w on %s", ErrUnsupported, runtime.GOARCH)
}
