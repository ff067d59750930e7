package elfobj

import (
	"os"

	"golang.org/x/sys/unix"
)

// mapRange maps n bytes of file at off read-only, populated (see
// MapSections); nil when it cannot.
func mapRange(file *os.File, off, n uint64) []byte {
	page := uint64(os.Getpagesize())
	start := off &^ (page - 1)
	size := off - start + n
	if size != uint64(int(size)) || start != uint64(int64(start)) {
		return nil
	}
	m, err := unix.Mmap(int(file.Fd()), int64(start), int(size), unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_POPULATE)
	if err != nil {
		return nil
	}
	return m[off-start : size : size]
}
