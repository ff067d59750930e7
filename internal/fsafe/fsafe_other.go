//go:build !linux

package fsafe

import (
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// Open opens path for reading if it is a regular file, returning the file
// and its status. Without Linux's O_PATH the file is opened with
// O_NONBLOCK (so that a FIFO cannot block) and checked after: a device
// node is opened, but refused before anything is read.
func Open(path string) (*os.File, fs.FileInfo, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		var st unix.Stat_t
		kind := "not a regular file"
		if unix.Lstat(path, &st) == nil {
			kind = Kind(uint32(st.Mode))
		}
		return nil, nil, fmt.Errorf("%s: %w (%s)", path, ErrNotRegular, kind)
	}
	return f, fi, nil
}
