package hugeheap

import (
	"runtime"
	"runtime/debug"
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
	// No collection while b is allocated: the heap's first goal (4 MB)
	// would start one, and the runtime.GC below would then wait for it
	// and run a second (two cycles, 3 ms of a cold dump on the
	// development VM, instead of one).
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
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
