package symbolize

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePage is the size of a transparent huge page on the architectures
// rewind runs on (amd64, arm64 with 4 KiB pages).
const hugePage = 2 << 20

// bigBuffer returns a zeroed buffer of n bytes for a section about to be
// written from start to end. A buffer of megabytes is asked to be backed
// by transparent huge pages (where the system leaves that to madvise, as
// most do): writing libc's 6 MB of .debug_info then takes three page
// faults instead of 1,400, which cost a cold dump about a millisecond.
// The memory is Go's like any other; the advice only changes how the
// kernel backs it.
func bigBuffer(n uint64) []byte {
	if n < hugePage || n > maxSection {
		return make([]byte, n)
	}
	// A huge page backs an aligned 2 MiB: the buffer starts at one.
	b := make([]byte, n+hugePage)
	start := uintptr(unsafe.Pointer(&b[0]))
	skip := ((start + hugePage - 1) &^ (hugePage - 1)) - start
	end := (start + uintptr(len(b))) &^ (hugePage - 1)
	if lo := start + skip; end > lo {
		_ = unix.Madvise(b[skip:end-start], unix.MADV_HUGEPAGE)
	}
	return b[skip : skip+uintptr(n) : skip+uintptr(n)]
}
