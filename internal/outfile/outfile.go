// Package outfile writes the files rewind is asked to write (a profile's
// -o file, sframe gen's output, a Go overlay, the agent's pprof files),
// one way for all of them:
//
//   - The contents go to a new file in the destination's directory,
//     created with O_EXCL|O_NOFOLLOW under a hidden temporary name, and
//     are synced before that file is renamed onto the destination. A
//     failed write (a full disk: ENOSPC, often reported only by fsync)
//     removes the temporary file and leaves any old file untouched.
//   - Only a regular file is ever replaced. A destination that is a
//     symbolic link, FIFO, device, socket or directory is refused with an
//     error naming it and its kind (wrapping fsafe.ErrNotRegular): no
//     link is followed, no FIFO opened (which would block), no device
//     written or chmodded.
//   - A replaced file keeps its owner, group and permission bits (not a
//     set-user-ID, set-group-ID or sticky bit: the contents are new); when
//     the new file cannot be given them (another user's file, written by
//     someone who may not chown) the write is refused with an error
//     saying so, and the old file stays.
//   - A new file gets the caller's permissions minus the umask. Modes are
//     set on the open temporary file (fchmod, fchown), never on a path.
//   - CommitNoReplace and WriteUnique claim a name atomically
//     (renameat2 RENAME_NOREPLACE, else link(2)), so concurrent runs that
//     pick the same default name never replace each other's files.
//
// The fsync is the price of never leaving an empty or partial file under
// the destination's name after a crash: on ext4 it made a 16 KiB write
// take 6-16 ms instead of 1-2.5 ms (BenchmarkWriteFile, load average 50).
//
// Replacing a file breaks its hard links (the other names keep the old
// contents) and drops its extended attributes and ACLs. The directory
// itself is not synced: a crash right after the rename may lose the new
// name, never the contents of a file that has it.
package outfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rewindstack/rewind/internal/fsafe"
	"golang.org/x/sys/unix"
)

// File is an output file being written under a temporary name in its
// destination's directory. Write to it, then call Commit (or
// CommitNoReplace) to give it its name, or Abort to remove it; Abort
// after a commit does nothing, so it can be deferred.
type File struct {
	*os.File
	path  string // the destination
	dir   string // its directory, as named
	dirfd int    // the directory, opened once: every step acts in it
	tmp   string // the temporary name in dir
	perm  os.FileMode
	done  bool // committed or aborted
	shut  bool // synced, given its mode and closed
}

// Check reports an error if path exists and is not a regular file: a
// command calls it before working for long, so that an output it would
// refuse to write is refused at once.
func Check(path string) error {
	var st unix.Stat_t
	err := unix.Lstat(path, &st)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	return regular(path, &st)
}

// regular refuses a destination that is not a regular file.
func regular(path string, st *unix.Stat_t) error {
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		return nil
	}
	return fmt.Errorf("%s is %s (%w): refusing to replace it", path, fsafe.Kind(st.Mode), fsafe.ErrNotRegular)
}

// Create starts writing path: it opens path's directory and creates a
// new temporary file there (mode 0600 until committed). perm is the mode
// a new file gets, minus the umask. A path that exists and is not a
// regular file is refused here already.
func Create(path string, perm os.FileMode) (*File, error) {
	if err := Check(path); err != nil {
		return nil, err
	}
	return create(path, perm)
}

// create is Create without the check of what path names now.
func create(path string, perm os.FileMode) (*File, error) {
	dir, base := filepath.Split(path)
	if base == "" || base == "." || base == ".." {
		return nil, fmt.Errorf("%s: not a file name", path)
	}
	if dir == "" {
		dir = "."
	}
	// O_PATH: a directory one may write but not list (mode 0333)
	// is still a place to write in.
	dirfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	// Keep the temporary name within NAME_MAX.
	stem := base
	if len(stem) > 200 {
		stem = stem[:200]
	}
	for range 100 {
		tmp := "." + stem + "." + strconv.FormatUint(rand.Uint64()&(1<<40-1), 36) + ".tmp"
		fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			unix.Close(dirfd)
			return nil, fmt.Errorf("%s: cannot create a file in %s: %w", path, dir, err)
		}
		// Named by the destination, for errors that name what the
		// user asked for rather than a random name.
		return &File{File: os.NewFile(uintptr(fd), path), path: path, dir: dir, dirfd: dirfd, tmp: tmp, perm: perm}, nil
	}
	unix.Close(dirfd)
	return nil, fmt.Errorf("%s: cannot create a temporary file in %s", path, dir)
}

// Path returns the destination the file was created for.
func (f *File) Path() string { return f.path }

// Abort removes the temporary file. It does nothing after a commit.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	if !f.shut {
		f.File.Close()
	}
	unix.Unlinkat(f.dirfd, f.tmp, 0)
	unix.Close(f.dirfd)
}

// finish syncs the temporary file, gives it mode (and owner uid, gid
// unless negative), and closes it.
func (f *File) finish(mode os.FileMode, uid, gid int, dest string) error {
	if err := f.File.Sync(); err != nil {
		return err // names the destination
	}
	fd := int(f.File.Fd())
	if uid >= 0 {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return &fs.PathError{Op: "stat", Path: dest, Err: err}
		}
		if int(st.Uid) != uid || int(st.Gid) != gid {
			if err := unix.Fchown(fd, uid, gid); err != nil {
				return fmt.Errorf("%s belongs to uid %d, gid %d, and the new file cannot (%w): not replacing it (remove it, or write elsewhere)", dest, uid, gid, err)
			}
		}
	}
	// After fchown, which may clear set-ID bits.
	if err := unix.Fchmod(fd, uint32(mode.Perm())); err != nil {
		return &fs.PathError{Op: "chmod", Path: dest, Err: err}
	}
	f.shut = true
	return f.File.Close()
}

// Commit syncs the file and renames it onto its destination. An existing
// destination must still be a regular file; the new file takes its
// owner, group and permissions, or nothing is replaced. On error the
// temporary file is removed.
func (f *File) Commit() error {
	if f.done {
		return fmt.Errorf("%s: already committed or aborted", f.path)
	}
	defer f.Abort()
	if f.shut {
		return fmt.Errorf("%s: Commit after CommitNoReplace", f.path)
	}
	base := filepath.Base(f.path)
	mode, uid, gid := fsafe.CreateMode(f.perm), -1, -1
	var st unix.Stat_t
	switch err := unix.Fstatat(f.dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil:
		if err := regular(f.path, &st); err != nil {
			return err
		}
		mode, uid, gid = os.FileMode(st.Mode&0o777), int(st.Uid), int(st.Gid)
	case !errors.Is(err, unix.ENOENT):
		return &fs.PathError{Op: "stat", Path: f.path, Err: err}
	}
	if err := f.finish(mode, uid, gid, f.path); err != nil {
		return err
	}
	if err := unix.Renameat(f.dirfd, f.tmp, f.dirfd, base); err != nil {
		return &fs.PathError{Op: "rename", Path: f.path, Err: err}
	}
	f.done = true
	unix.Close(f.dirfd)
	return nil
}

// CommitNoReplace syncs the file and gives it the name path, which must
// be in the destination's directory, only if no file has that name. If
// one has, it returns an error wrapping fs.ErrExist and the file stays
// uncommitted, for the caller to try another name; on any other error
// the temporary file is removed.
func (f *File) CommitNoReplace(path string) error {
	if f.done {
		return fmt.Errorf("%s: already committed or aborted", path)
	}
	if filepath.Clean(filepath.Dir(path)) != filepath.Clean(f.dir) {
		return fmt.Errorf("%s: not in %s, where the file was written", path, f.dir)
	}
	if !f.shut {
		if err := f.finish(fsafe.CreateMode(f.perm), -1, -1, path); err != nil {
			f.Abort()
			return err
		}
	}
	base := filepath.Base(path)
	err := unix.Renameat2(f.dirfd, f.tmp, f.dirfd, base, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
		// The file system cannot: a hard link never replaces either.
		if err = unix.Linkat(f.dirfd, f.tmp, f.dirfd, base, 0); err == nil {
			unix.Unlinkat(f.dirfd, f.tmp, 0)
		}
	}
	if errors.Is(err, unix.EEXIST) {
		return &fs.PathError{Op: "create", Path: path, Err: fs.ErrExist}
	}
	if err != nil {
		f.Abort()
		return &fs.PathError{Op: "rename", Path: path, Err: err}
	}
	f.done = true
	unix.Close(f.dirfd)
	return nil
}

// Write writes path with what write writes, through Create and Commit:
// an error (write's or the file system's) leaves the old file as it was.
func Write(path string, perm os.FileMode, write func(w io.Writer) error) error {
	f, err := Create(path, perm)
	if err != nil {
		return err
	}
	defer f.Abort()
	if err := write(f); err != nil {
		return wrap(path, err)
	}
	return f.Commit()
}

// wrap names path in an error of a write function unless it does.
func wrap(path string, err error) error {
	if strings.Contains(err.Error(), path) {
		return err
	}
	return fmt.Errorf("writing %s: %w", path, err)
}

// WriteFile writes data to path like Write.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// MaxUnique bounds the names WriteUnique tries.
const MaxUnique = 1000

// WriteUnique writes a new file under the first of name(1), name(2), ...
// name(MaxUnique) that no file has, claiming it atomically, and returns
// that name. All names must be in one directory.
func WriteUnique(name func(i int) string, perm os.FileMode, write func(w io.Writer) error) (string, error) {
	first := name(1)
	// Whatever has the name (a link, a FIFO) only makes it taken.
	f, err := create(first, perm)
	if err != nil {
		return "", err
	}
	defer f.Abort()
	if err := write(f); err != nil {
		return "", wrap(first, err)
	}
	for i := 1; i <= MaxUnique; i++ {
		p := name(i)
		err := f.CommitNoReplace(p)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", err
		}
	}
	return "", fmt.Errorf("%s: %d files with such names exist already", first, MaxUnique)
}
