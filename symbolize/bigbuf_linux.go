package symbolize

import (
	"io"
	"os"
	"sync"
	"unsafe"

	"github.com/rewindstack/rewind/internal/elfdata"
	"golang.org/x/sys/unix"
)

// hugePage is the size of a transparent huge page on the architectures
// rewind runs on (amd64, arm64 with 4 KiB pages).
const hugePage = 2 << 20

// bigBuffer returns a zeroed buffer of n bytes for a section about to be
// written from start to end. A buffer of megabytes is asked to be backed
// by transparent huge pages (where the system leaves that to madvise, as
// most do): writing libc's 6 MB of .debug_info then takes three page
// faults instead of 1,400, which cost a cold dump about a millisecond.
// The memory is Go's like any other; the advice only changes how the
// kernel backs it.
func bigBuffer(n uint64) []byte {
	if n < hugePage || n > elfdata.MaxSection {
		return make([]byte, n)
	}
	if outsideHeap.Load() {
		if b := anonBuffer(n); b != nil {
			return b
		}
	}
	// A huge page backs an aligned 2 MiB: the buffer starts at one.
	b := make([]byte, n+hugePage)
	start := uintptr(unsafe.Pointer(&b[0]))
	skip := ((start + hugePage - 1) &^ (hugePage - 1)) - start
	end := (start + uintptr(len(b))) &^ (hugePage - 1)
	if lo := start + skip; end > lo {
		_ = unix.Madvise(b[skip:end-start], unix.MADV_HUGEPAGE)
	}
	return b[skip : skip+uintptr(n) : skip+uintptr(n)]
}

// anonBuffer returns n bytes of fresh anonymous memory outside the Go
// heap, from a huge page boundary, advised to be backed by huge pages
// (see BuffersOutsideHeap); nil when the mapping fails.
func anonBuffer(n uint64) []byte {
	size := n + hugePage
	if size != uint64(int(size)) {
		return nil
	}
	m, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil
	}
	start := uintptr(unsafe.Pointer(&m[0]))
	skip := ((start + hugePage - 1) &^ (hugePage - 1)) - start
	b := m[skip : skip+uintptr(n) : skip+uintptr(n)]
	_ = unix.Madvise(m[skip:skip+(uintptr(n)&^(hugePage-1))], unix.MADV_HUGEPAGE)
	return b
}

// fileMap is a read-only mapping of part of a file.
type fileMap struct {
	data []byte // the part asked for
	once sync.Once
	all  []byte // the mapping, from a page boundary
}

// mapFile maps n bytes of r at off, read-only and populated from the page
// cache (one system call, no copy, no fresh pages); nil if r is not a
// file, the file is shorter, or the mapping fails. A file cut short later
// faults on access to the lost pages (see inflater.run).
func mapFile(r io.ReaderAt, off, n int64) *fileMap {
	f, ok := r.(*os.File)
	if !ok || off < 0 || n <= 0 {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Size < off || st.Size-off < n {
		return nil
	}
	start := off &^ int64(os.Getpagesize()-1)
	size := off - start + n
	if size != int64(int(size)) {
		return nil
	}
	all, err := unix.Mmap(int(f.Fd()), start, int(size), unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_POPULATE)
	if err != nil {
		return nil
	}
	return &fileMap{data: all[off-start:], all: all}
}

// release unmaps m (once; nil does nothing). Nothing may read its data
// after.
func (m *fileMap) release() {
	if m != nil {
		m.once.Do(func() { _ = unix.Munmap(m.all) })
	}
}
