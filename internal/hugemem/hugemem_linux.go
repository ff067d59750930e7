package hugemem

import (
	"os"
	"strings"
	"sync"
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

var thp = sync.OnceValue(func() bool {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	s := string(b)
	return err == nil && (strings.Contains(s, "[always]") || strings.Contains(s, "[madvise]"))
})

func available() bool { return thp() }

func mapAnon(n int) ([]byte, error) {
	if n < Size {
		b, err := unix.Mmap(-1, 0, max(n, 1), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return nil, err
		}
		return b[:n], nil
	}
	// Mapped a huge page larger, then cut to start at a huge-page
	// boundary and end at the next one after n bytes: every page of it
	// can be huge.
	whole := uintptr(n+Size-1) &^ (Size - 1)
	p, err := unix.MmapPtr(-1, 0, nil, whole+Size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, err
	}
	head := ((uintptr(p) + Size - 1) &^ (Size - 1)) - uintptr(p)
	if head > 0 {
		_ = unix.MunmapPtr(p, head)
	}
	if tail := Size - head; tail > 0 {
		_ = unix.MunmapPtr(unsafe.Add(p, head+whole), tail)
	}
	b := unsafe.Slice((*byte)(unsafe.Add(p, head)), whole)
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE)
	return b[:n], nil
}

func unmapAnon(b []byte) error {
	if cap(b) < Size {
		return unix.Munmap(b[:cap(b)])
	}
	return unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(b)), uintptr(cap(b)))
}
