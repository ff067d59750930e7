package prefetch

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestBytes prefetches whole buffers, their last bytes and nothing, up to
// an inaccessible page: nothing may fault.
func TestBytes(t *testing.T) {
	page := os.Getpagesize()
	m, err := unix.Mmap(-1, 0, 2*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Skip(err)
	}
	defer unix.Munmap(m)
	if err := unix.Mprotect(m[page:], unix.PROT_NONE); err != nil {
		t.Skip(err)
	}
	buf := m[:page]
	Bytes(buf)
	Bytes(buf[page-1:])
	Bytes(buf[page-64:])
	Bytes(buf[:0])
	Bytes(nil)
	// An unmapped region: prefetches are dropped, not faulted.
	Bytes(m[page : page+64])
}
