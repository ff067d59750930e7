// Package hugemem hands out byte buffers that the kernel may back with
// transparent huge pages.
//
// A buffer of megabytes written once takes one page fault per 4 KiB page
// it touches. Where the system leaves transparent huge pages to madvise
// (most distributions do), asking for them turns 512 of those faults into
// one. On virtual machines whose guest page tables are shadowed by the
// host a fault costs several microseconds, so a 2 MiB buffer then costs
// about 0.4 ms instead of 2.5-5 ms (when the host took the memory back
// after it was last freed, a huge page costs 2.7-3.9 ms all the same).
package hugemem

// Size is the size of a transparent huge page on the architectures rewind
// runs on (amd64, and arm64 with 4 KiB pages).
const Size = 2 << 20

// Bytes returns a zeroed buffer of n bytes. When n is at least Size, the
// buffer starts at a huge-page boundary and the kernel is asked to back
// it with huge pages; smaller buffers are plain allocations. The memory
// is Go's like any other: the advice only changes how the kernel backs
// it.
func Bytes(n int) []byte {
	if n < Size {
		return make([]byte, n)
	}
	return advise(n)
}
