// Package fsafe opens files whose names come from untrusted data (a core's
// NT_FILE note, a perf.data MMAP record, /proc maps, the command line, the
// cache) without ever blocking on them or opening a device: the path is
// first opened with O_PATH, which runs no driver code and cannot block on
// a FIFO, checked to be a regular file, and only then reopened for
// reading through /proc/self/fd.
package fsafe

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrNotRegular is wrapped by the error for a path that names a FIFO, a
// device, a socket or a directory.
var ErrNotRegular = errors.New("not a regular file")

// Open opens path for reading if it is a regular file, returning the file
// and its status. A FIFO, device node, socket or directory is refused with
// an error naming the path and its kind (wrapping ErrNotRegular), before
// anything that could block or touch a device happens.
func Open(path string) (*os.File, fs.FileInfo, error) {
	return open(path, 0)
}

// OpenNoFollow is Open that also refuses a symbolic link as the last
// component of path.
func OpenNoFollow(path string) (*os.File, fs.FileInfo, error) {
	return open(path, unix.O_NOFOLLOW)
}

func open(path string, extra int) (*os.File, fs.FileInfo, error) {
	pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC|extra, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) && extra&unix.O_NOFOLLOW != 0 {
			return nil, nil, &fs.PathError{Op: "open", Path: path, Err: errors.New("is a symbolic link (not followed)")}
		}
		return nil, nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, nil, fmt.Errorf("%s: %w (%s)", path, ErrNotRegular, Kind(st.Mode))
	}
	// Reopen the very inode O_PATH found; O_NONBLOCK keeps even a race
	// that swapped the inode's type from blocking.
	flags := unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NONBLOCK | unix.O_NOCTTY
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), flags, 0)
	if err != nil {
		// No /proc: open the path itself, without following a link
		// swapped in meanwhile, and check it is still the same file.
		fd, err = unix.Open(path, flags|unix.O_NOFOLLOW, 0)
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

// Kind names the file type in a stat mode, for error messages.
func Kind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFLNK:
		return "a symbolic link"
	}
	return "a regular file"
}

// Umask returns the process's file mode creation mask, read from
// /proc/self/status where the kernel shows it (setting and restoring it
// would race with other threads creating files).
func Umask() os.FileMode {
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Umask:"); ok {
				if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
					return os.FileMode(m) & 0o777
				}
			}
		}
	}
	m := unix.Umask(0o077)
	unix.Umask(m)
	return os.FileMode(m) & 0o777
}

// CreateMode is the mode a file created with perm gets under the umask,
// for files written under a temporary name (os.CreateTemp makes them
// 0600) and then given their final mode.
func CreateMode(perm os.FileMode) os.FileMode { return perm &^ Umask() }
