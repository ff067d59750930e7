// Package cachefile keeps the files of rewind's persistent caches (unwind
// tables, DWARF indexes, kernel symbols) in one directory tree, safely:
//
//   - Dir says where the tree is; nothing else decides it.
//   - Every directory of the tree must belong to the current user and be
//     writable by no one else, or it is refused with an error saying why
//     (an *UntrustedError): a cache another user can write is a way to
//     make rewind print false stacks.
//   - Below the root no symbolic link is followed (every component is
//     opened with O_NOFOLLOW relative to its parent), and no FIFO or device
//     is opened: a file planted in the cache cannot redirect a write or
//     block a read.
//   - Files are created under a fresh name with O_EXCL and renamed into
//     place, so concurrent rewind processes never read a partial one.
//   - Every file ends with a CRC-32 (IEEE) of its key and contents:
//     Read returns an error wrapping ErrCorrupt for a file that is
//     truncated, altered or was written for another key, and the caller
//     rebuilds it.
package cachefile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Dir returns where rewind keeps its persistent caches: $REWIND_CACHE_DIR,
// else the user's cache directory ($XDG_CACHE_HOME or ~/.cache) +
// "/rewind". It is "" when neither can be determined.
func Dir() string {
	if d := os.Getenv("REWIND_CACHE_DIR"); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "rewind")
}

// Help says where the cache lives, for command-line help.
const Help = "$REWIND_CACHE_DIR, else $XDG_CACHE_HOME/rewind or ~/.cache/rewind"

// ErrCorrupt is wrapped by Read's error for a file whose checksum does not
// match its key and contents.
var ErrCorrupt = errors.New("checksum mismatch")

// UntrustedError reports a cache directory or file rewind refuses to use.
type UntrustedError struct {
	Path   string
	Reason string
}

func (e *UntrustedError) Error() string {
	return fmt.Sprintf("cache %s: %s: refusing to use it (remove it, or set REWIND_CACHE_DIR)", e.Path, e.Reason)
}

// trailer follows the contents of every file: a magic, the length of the
// contents and their checksum.
const trailerMagic = "RWC2" // RWC1 files (CRC-32C) read as corrupt and are rebuilt

const trailerLen = len(trailerMagic) + 8 + 4

// The checksum is CRC-32 (IEEE), computed with carry-less multiplication
// (PCLMULQDQ, ARMv8 CRC32) at many gigabytes a second and, unlike CRC-32C,
// with no table to build at start-up (Go's CRC-32C tables cost 0.2 ms of
// every dump). It detects damage (a torn write, a flipped bit, a file
// copied under another key's name), not forgery — only the current user
// can write the cache (see trusted), and keys name the contents they were
// built from with a cryptographic hash where it matters (unwind tables:
// target.tableKey).

// trailer returns what Write puts after data for key.
func trailer(key string, data []byte) []byte {
	crc := crc32.Update(0, crc32.IEEETable, []byte(key))
	crc = crc32.Update(crc, crc32.IEEETable, []byte{0})
	crc = crc32.Update(crc, crc32.IEEETable, data)
	b := append([]byte(trailerMagic), make([]byte, 12)...)
	binary.LittleEndian.PutUint64(b[len(trailerMagic):], uint64(len(data)))
	binary.LittleEndian.PutUint32(b[len(trailerMagic)+8:], crc)
	return b
}

// trusted checks that a file or directory with status st belongs to the
// current user and is writable by no one else.
func trusted(path string, st *unix.Stat_t) error {
	if uid := uint32(os.Geteuid()); st.Uid != uid {
		return &UntrustedError{Path: path, Reason: fmt.Sprintf("owned by uid %d, not by the current user (uid %d)", st.Uid, uid)}
	}
	if st.Mode&0o022 != 0 {
		return &UntrustedError{Path: path, Reason: fmt.Sprintf("writable by group or others (mode %#o)", st.Mode&0o7777)}
	}
	return nil
}

// CheckRoot creates root (mode 0700) when missing and checks that it
// belongs to the current user and is writable by no one else. Commands
// call it once before using a cache, to refuse an untrusted one with a
// clear message.
func CheckRoot(root string) error {
	fd, err := openRoot(root, true)
	if err != nil {
		return err
	}
	unix.Close(fd)
	return nil
}

// openRoot opens the root directory (which may itself be reached through
// a symbolic link: it is named by the user) and checks it.
func openRoot(root string, create bool) (int, error) {
	if root == "" {
		return -1, errors.New("cache: no directory")
	}
	if create {
		if err := os.MkdirAll(root, 0o700); err != nil {
			return -1, fmt.Errorf("cache: %w", err)
		}
	}
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: root, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := trusted(root, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// openDir walks rel's directories below root without following links,
// creating missing ones when create is set, checking each, and returns a
// descriptor of the last one and the file name.
func openDir(root, rel string, create bool) (int, string, error) {
	parts := strings.Split(filepath.ToSlash(filepath.Clean(rel)), "/")
	for _, p := range parts {
		if p == "" || p == "." || p == ".." {
			return -1, "", fmt.Errorf("cache: bad file name %q", rel)
		}
	}
	fd, err := openRoot(root, create)
	if err != nil {
		return -1, "", err
	}
	at := root
	for _, p := range parts[:len(parts)-1] {
		at = filepath.Join(at, p)
		if create {
			if err := unix.Mkdirat(fd, p, 0o700); err != nil && err != unix.EEXIST {
				unix.Close(fd)
				return -1, "", &fs.PathError{Op: "mkdir", Path: at, Err: err}
			}
		}
		nfd, err := unix.Openat(fd, p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			if err == unix.ELOOP || err == unix.ENOTDIR {
				var st unix.Stat_t
				if unix.Lstat(at, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
					return -1, "", &UntrustedError{Path: at, Reason: "is a symbolic link"}
				}
			}
			return -1, "", &fs.PathError{Op: "open", Path: at, Err: err}
		}
		var st unix.Stat_t
		if err := unix.Fstat(nfd, &st); err != nil {
			unix.Close(nfd)
			return -1, "", err
		}
		if err := trusted(at, &st); err != nil {
			unix.Close(nfd)
			return -1, "", err
		}
		fd = nfd
	}
	return fd, parts[len(parts)-1], nil
}

// Read returns the contents of the file rel (a slash-separated path below
// root) written by Write with the same key, at most max bytes of them. A
// missing file is an error satisfying errors.Is(err, fs.ErrNotExist); a
// damaged one or one written for another key wraps ErrCorrupt; a symbolic
// link, FIFO, device or a file or directory of another user is refused.
// The returned bytes may be a read-only mapping of the file: callers must
// not modify them.
func Read(root, rel, key string, max int64) ([]byte, error) {
	dfd, name, err := openDir(root, rel, false)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	path := filepath.Join(root, rel)
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ELOOP {
			return nil, &UntrustedError{Path: path, Reason: "is a symbolic link"}
		}
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, &UntrustedError{Path: path, Reason: "is not a regular file"}
	}
	if err := trusted(path, &st); err != nil {
		return nil, err
	}
	if st.Size < int64(trailerLen) || st.Size-int64(trailerLen) > max {
		return nil, fmt.Errorf("cache %s: %w: implausible size %d", path, ErrCorrupt, st.Size)
	}
	data, mapped, err := load(f, fd, st.Size)
	if err != nil {
		return nil, fmt.Errorf("cache %s: %w", path, err)
	}
	body, tr := data[:len(data)-trailerLen], data[len(data)-trailerLen:]
	if !bytes.Equal(tr, trailer(key, body)) {
		if mapped {
			unix.Munmap(data)
		}
		return nil, fmt.Errorf("cache %s: %w", path, ErrCorrupt)
	}
	return body, nil
}

// mapMin is the size from which Read maps a file instead of reading it.
const mapMin = 64 << 10

// load returns the file's size bytes. A large file is mapped (read-only,
// populated from the page cache): a DWARF index of a megabyte or two is
// then neither copied nor written into fresh, zeroed pages, which cost
// more than the rest of reading it. The mapping lives as long as the
// process (the caller keeps slices of it, and must not write to them);
// the cache's files are replaced by rename, never rewritten in place, so
// it does not change under it.
func load(f *os.File, fd int, size int64) (data []byte, mapped bool, err error) {
	if size >= mapMin && size == int64(int(size)) {
		if b, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_POPULATE); err == nil {
			return b, true, nil
		}
	}
	data = make([]byte, size)
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, false, err
	}
	return data, false, nil
}

// MakeDirs makes the directories below root that Write of rel would make
// (errors are left for Write to report). Called ahead, in the background,
// it takes them off the Write: making a directory cost about 60 us, a
// file written into existing ones 120 us.
func MakeDirs(root, rel string) {
	if fd, _, err := openDir(root, rel, true); err == nil {
		unix.Close(fd)
	}
}

// Write stores data under rel below root for key, creating the directories
// (mode 0700) when needed, through a file created with O_EXCL in the same
// directory and a rename: a reader sees the old file or the whole new one.
// On error nothing is left behind.
func Write(root, rel, key string, data []byte) error {
	dfd, name, err := openDir(root, rel, true)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	var tmp string
	var fd int
	for i := 0; ; i++ {
		tmp = ".tmp-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(int(tmpSeq.next())) + "-" + name
		fd, err = unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != unix.EEXIST || i > 100 {
			break
		}
	}
	if err != nil {
		return &fs.PathError{Op: "create", Path: filepath.Join(root, rel), Err: err}
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, err = f.Write(data)
	if err == nil {
		_, err = f.Write(trailer(key, data))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dfd, tmp, dfd, name)
	}
	if err != nil {
		unix.Unlinkat(dfd, tmp, 0)
		return fmt.Errorf("cache %s: %w", filepath.Join(root, rel), err)
	}
	return nil
}

type seq struct {
	mu sync.Mutex
	n  uint64
}

func (s *seq) next() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	return s.n
}

var tmpSeq seq

// Notes collects what the caches did that a user may want to know: files
// found corrupt and rebuilt, directories refused. Commands print them
// (refusals always, rebuilds with --stats).
var notes struct {
	mu        sync.Mutex
	untrusted []string
	other     []string
	seen      map[string]bool
}

// Note records what happened to a cache file: err from Read or Write, and
// what was done about it. Missing files are not noted.
func Note(err error, action string) {
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return
	}
	msg := err.Error()
	if action != "" {
		msg += ": " + action
	}
	notes.mu.Lock()
	defer notes.mu.Unlock()
	if notes.seen == nil {
		notes.seen = map[string]bool{}
	}
	if notes.seen[msg] {
		return
	}
	notes.seen[msg] = true
	var ue *UntrustedError
	if errors.As(err, &ue) {
		notes.untrusted = append(notes.untrusted, msg)
	} else {
		notes.other = append(notes.other, msg)
	}
}

// TakeNotes returns and forgets the notes recorded so far: refusals of
// untrusted files or directories, and everything else (corrupt files
// rebuilt, failed writes).
func TakeNotes() (untrusted, other []string) {
	notes.mu.Lock()
	defer notes.mu.Unlock()
	untrusted, other = notes.untrusted, notes.other
	notes.untrusted, notes.other, notes.seen = nil, nil, nil
	return untrusted, other
}

// Identity writes to h what identifies the file at path as it is now: the
// path, device, inode, size, modification and change times. A key that
// includes it names the very file an entry was built from: a file
// replaced or rewritten in place (even with the same size, build-id and
// modification time) gets a new entry, because the change time cannot be
// set back by an unprivileged user.
func Identity(h io.Writer, path string) {
	fmt.Fprintf(h, "\x00%s", path)
	var st unix.Stat_t
	if unix.Stat(path, &st) == nil {
		fmt.Fprintf(h, "\x00%d\x00%d\x00%d\x00%d.%d\x00%d.%d", st.Dev, st.Ino, st.Size,
			st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
	}
}
