// Package hugemem hands out byte buffers that the kernel may back with
// transparent huge pages: in the Go heap (Bytes) or outside it (Map).
//
// A buffer of megabytes written once takes one page fault per 4 KiB page
// it touches. Where the system leaves transparent huge pages to madvise
// (most distributions do), asking for them turns 512 of those faults into
// one. On virtual machines whose guest page tables are shadowed by the
// host a fault costs several microseconds, so a 2 MiB buffer then costs
// about 0.4 ms instead of 2.5-5 ms.
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

// Available reports whether the kernel backs memory with transparent huge
// pages when asked (its setting is "always" or "madvise"): without them a
// large buffer costs a page fault per 4 KiB.
func Available() bool { return available() }

// Map returns n bytes of fresh anonymous memory outside the Go heap, which
// the kernel is asked to back with huge pages, for a buffer whose owner
// frees it with Unmap (the garbage collector does not see it, and must not
// be relied on to keep what it points to alive: it may hold no pointers).
// Unlike Bytes, its pages are never touched before the caller writes them,
// whatever the heap's state: memory the Go heap reuses is zeroed, 4 KiB
// at a time, before any advice can be given.
func Map(n int) ([]byte, error) { return mapAnon(n) }

// Unmap frees memory from Map.
func Unmap(b []byte) error { return unmapAnon(b) }
