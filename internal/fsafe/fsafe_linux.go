//go:build linux

package fsafe

import (
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Open opens path for reading if it is a regular file, returning the file
// and its status. A FIFO, device node, socket or directory is refused with
// an error naming the path and its kind (wrapping ErrNotRegular), before
// anything that could block or touch a device happens.
func Open(path string) (*os.File, fs.FileInfo, error) {
	pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, nil, fmt.Errorf("%s: %w (%s)", path, ErrNotRegular, Kind(uint32(st.Mode)))
	}
	// Reopen the very inode O_PATH found; O_NONBLOCK keeps even a race
	// that swapped the inode's type from blocking.
	flags := unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NONBLOCK | unix.O_NOCTTY
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), flags, 0)
	if err != nil {
		// No /proc: open the path itself (O_NONBLOCK: a FIFO swapped in
		// meanwhile cannot block) and check below it is the same file.
		fd, err = unix.Open(path, flags, 0)
		if err != nil {
			return nil, nil, &fs.PathError{Op: "open", Path: path, Err: err}
		}
	}
	f := os.NewFile(uintptr(fd), path)
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if sys, ok := fi.Sys().(*syscall.Stat_t); !fi.Mode().IsRegular() || !ok || uint64(sys.Dev) != uint64(st.Dev) || uint64(sys.Ino) != uint64(st.Ino) {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w (changed while being opened)", path, ErrNotRegular)
	}
	return f, fi, nil
}
