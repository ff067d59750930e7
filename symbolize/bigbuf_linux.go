package symbolize

import (
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

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
