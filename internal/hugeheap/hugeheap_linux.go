package hugeheap

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Reserve makes about the next n bytes the heap grows into be backed by
// huge pages where the kernel gives them on request: it allocates n
// bytes (fresh, untouched memory), advises the kernel to back them with
// huge pages, and frees them with a collection, so that the allocations
// that follow take their pages from there. Call it first thing, before
// anything else allocates much (and before gcdefer.Until: it runs a
// collection). It costs a collection of an almost empty heap.
func Reserve(n int) {
	if n < 2*hugePage {
		return
	}
	b := make([]byte, n)
	start := uintptr(unsafe.Pointer(&b[0]))
	lo := (start+hugePage-1)&^(hugePage-1) - start
	hi := (start+uintptr(n))&^(hugePage-1) - start
	if hi > lo {
		_ = unix.Madvise(b[lo:hi], unix.MADV_HUGEPAGE)
	}
	runtime.KeepAlive(b)
	b = nil
	runtime.GC()
}
