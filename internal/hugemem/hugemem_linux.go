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
	// A buffer of a huge page or more is mapped a huge page larger, then
	// cut to start at a huge-page boundary: every page of it can be huge.
	whole := (uintptr(max(n, 1)) + Size - 1) &^ (Size - 1)
	extra := uintptr(0)
	if n >= Size {
		extra = Size
	}
	p, err := unix.MmapPtr(-1, 0, nil, whole+extra, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, err
	}
	head := uintptr(0)
	if extra > 0 {
		head = ((uintptr(p) + Size - 1) &^ (Size - 1)) - uintptr(p)
		if head > 0 {
			_ = unix.MunmapPtr(p, head)
		}
		if tail := extra - head; tail > 0 {
			_ = unix.MunmapPtr(unsafe.Add(p, head+whole), tail)
		}
	}
	b := unsafe.Slice((*byte)(unsafe.Add(p, head)), whole)
	if extra > 0 {
		_ = unix.Madvise(b, unix.MADV_HUGEPAGE)
	}
	return b[:n], nil
}

func unmapAnon(b []byte) error {
	return unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(b)), uintptr(cap(b)))
}
