package hugemem

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// advise allocates n bytes from a huge-page boundary and asks for huge
// pages for the huge pages the allocation holds, the one the buffer ends
// in included when the allocation reaches its end.
func advise(n int) []byte {
	all := make([]byte, n+Size)
	start := uintptr(unsafe.Pointer(&all[0]))
	skip := int(((start + Size - 1) &^ (Size - 1)) - start)
	whole := min((n+Size-1)&^(Size-1), (len(all)-skip)&^(Size-1))
	_ = unix.Madvise(all[skip:skip+whole], unix.MADV_HUGEPAGE)
	return all[skip : skip+n : skip+n]
}
