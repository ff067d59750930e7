package hugemem

import "runtime"

// Heap makes the Go heap's next n bytes come from memory the kernel is
// asked to back with huge pages: it grows the heap by n bytes in one
// piece, advises it, and frees it with a garbage collection. The heap
// hands out its lowest free pages first, so what the program allocates
// next lands there. The memory is not touched (nothing is resident until
// used).
//
// It is meant for a short-lived command that allocates megabytes it keeps
// to the end with the collector off (rewind report): there, every 4 KiB
// page of heap is a page fault, and on a virtual machine whose page tables
// the host shadows each one cost about 10 µs, a fifth of a report's CPU
// time. The collection costs 0.2-3 ms; call it on a goroutine of its own
// while the command does other work.
func Heap(n int) {
	if n < Size {
		return
	}
	advise(n)
	runtime.GC()
}
