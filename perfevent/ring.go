package perfevent

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Offsets in struct perf_event_mmap_page.
const (
	offDataHead   = 1024
	offDataTail   = 1032
	offDataOffset = 1040
	offDataSize   = 1048
)

// ring is one mmap'ed perf ring buffer: a metadata page followed by a
// power-of-two data area the kernel writes records into.
type ring struct {
	mem  []byte
	data []byte
	head *uint64
	tail *uint64
	buf  []byte // reassembles records that wrap around the end
}

// mapRing maps fd's ring buffer with pages data pages, halving the size
// while the locked-memory limit refuses it.
func mapRing(fd int, pages int) (*ring, error) {
	ps := unix.Getpagesize()
	var mem []byte
	var err error
	for ; pages >= 1; pages /= 2 {
		mem, err = unix.Mmap(fd, 0, (pages+1)*ps, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err == nil {
			break
		}
		if err != unix.EPERM && err != unix.ENOMEM {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("mapping the perf ring buffer: %w (raise ulimit -l or kernel.perf_event_mlock_kb)", err)
	}
	r := &ring{mem: mem}
	base := unsafe.Pointer(&mem[0])
	r.head = (*uint64)(unsafe.Add(base, offDataHead))
	r.tail = (*uint64)(unsafe.Add(base, offDataTail))
	off := *(*uint64)(unsafe.Add(base, offDataOffset))
	size := *(*uint64)(unsafe.Add(base, offDataSize))
	if off == 0 || size == 0 { // kernels before 4.1 do not fill them
		off, size = uint64(ps), uint64(pages*ps)
	}
	if off+size > uint64(len(mem)) || size&(size-1) != 0 {
		unix.Munmap(mem)
		return nil, fmt.Errorf("perf ring buffer layout %#x+%#x does not fit the %d-byte mapping", off, size, len(mem))
	}
	r.data = mem[off : off+size]
	return r, nil
}

func (r *ring) unmap() {
	if r.mem != nil {
		unix.Munmap(r.mem)
		r.mem, r.data = nil, nil
	}
}

// drain hands every complete record between the tail and the head to fn,
// then publishes the new tail so the kernel can reuse the space.
//
// Ordering: the load of data_head is atomic (an acquire on every Go
// platform), so the record bytes read after it are at least as new as the
// head says; the store of data_tail is atomic (a release), so the kernel
// sees the new tail only after the bytes have been read. That is the
// smp_rmb / smp_mb pairing the kernel's perf_event_mmap_page documents.
func (r *ring) drain(fn func(rec []byte, off int64) error) error {
	if r.mem == nil {
		return nil
	}
	head := atomic.LoadUint64(r.head)
	tail := atomic.LoadUint64(r.tail)
	size := uint64(len(r.data))
	mask := size - 1
	var err error
	for tail < head && err == nil {
		if head-tail < 8 {
			break
		}
		start := tail & mask
		hdr := r.bytes(start, 8)
		n := uint64(hdr[6]) | uint64(hdr[7])<<8
		if n < 8 || n > head-tail {
			err = fmt.Errorf("perf ring buffer: corrupt record size %d at %#x (head %#x)", n, tail, head)
			tail = head
			break
		}
		err = fn(r.bytes(start, n), int64(tail))
		tail += n
	}
	atomic.StoreUint64(r.tail, tail)
	return err
}

// bytes returns n bytes at data offset start, copying them when they wrap.
func (r *ring) bytes(start, n uint64) []byte {
	size := uint64(len(r.data))
	if start+n <= size {
		return r.data[start : start+n : start+n]
	}
	if uint64(cap(r.buf)) < n {
		r.buf = make([]byte, n)
	}
	b := r.buf[:n]
	k := copy(b, r.data[start:])
	copy(b[k:], r.data[:n-uint64(k)])
	return b
}
