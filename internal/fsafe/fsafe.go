// Package fsafe opens files whose names come from untrusted data (a core's
// NT_FILE note, a perf.data MMAP record, /proc maps, the command line, the
// cache) without ever blocking on them or opening a device: the path is
// first opened with O_PATH, which runs no driver code and cannot block on
// a FIFO, checked to be a regular file, and only then reopened for
// reading through /proc/self/fd.
package fsafe

import (
	"errors"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNotRegular is wrapped by the error for a path that names a FIFO, a
// device, a socket or a directory.
var ErrNotRegular = errors.New("not a regular file")

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
