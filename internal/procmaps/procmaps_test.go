package procmaps

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rewindstack/rewind/target"
)

func TestParseMaps(t *testing.T) {
	text := strings.Join([]string{
		"55d0c0a00000-55d0c0a02000 r--p 00000000 fd:01 1234567                    /usr/bin/my prog",
		"55d0c0a02000-55d0c0a03000 r-xp 00002000 fd:01 1234567                    /usr/bin/my prog",
		"7f1e2c000000-7f1e2c021000 rw-p 00000000 00:00 0 ",
		"7f1e2d000000-7f1e2d001000 r-xp 00001000 08:02 42                         /tmp/a  b (deleted)",
		"7f1e2e000000-7f1e2e001000 rw-s 00000000 00:01 7                          /memfd:ring (deleted)",
		"7f1e2f000000-7f1e2f001000 rw-p 00000000 00:00 0                          [anon:glibc.malloc]",
		"7ffd4e5f2000-7ffd4e613000 rw-p 00000000 00:00 0                          [stack]",
		"7ffd4e7c4000-7ffd4e7c6000 r-xp 00000000 00:00 0                          [vdso]",
		"ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]",
		"",
	}, "\n")
	maps, err := Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	want := []target.Mapping{
		{Start: 0x55d0c0a00000, End: 0x55d0c0a02000, Perms: "r--p", Dev: "fd:01", Inode: 1234567, Path: "/usr/bin/my prog"},
		{Start: 0x55d0c0a02000, End: 0x55d0c0a03000, Offset: 0x2000, Perms: "r-xp", Dev: "fd:01", Inode: 1234567, Path: "/usr/bin/my prog"},
		{Start: 0x7f1e2c000000, End: 0x7f1e2c021000, Perms: "rw-p", Dev: "00:00"},
		{Start: 0x7f1e2d000000, End: 0x7f1e2d001000, Offset: 0x1000, Perms: "r-xp", Dev: "08:02", Inode: 42, Path: "/tmp/a  b", Deleted: true},
		{Start: 0x7f1e2e000000, End: 0x7f1e2e001000, Perms: "rw-s", Dev: "00:01", Inode: 7, Path: "/memfd:ring", Deleted: true},
		{Start: 0x7f1e2f000000, End: 0x7f1e2f001000, Perms: "rw-p", Dev: "00:00", Path: "[anon:glibc.malloc]"},
		{Start: 0x7ffd4e5f2000, End: 0x7ffd4e613000, Perms: "rw-p", Dev: "00:00", Path: "[stack]"},
		{Start: 0x7ffd4e7c4000, End: 0x7ffd4e7c6000, Perms: "r-xp", Dev: "00:00", Path: "[vdso]"},
		{Start: 0xffffffffff600000, End: 0xffffffffff601000, Perms: "--xp", Dev: "00:00", Path: "[vsyscall]"},
	}
	if len(maps) != len(want) {
		t.Fatalf("%d mappings, want %d: %+v", len(maps), len(want), maps)
	}
	for i := range want {
		if maps[i] != want[i] {
			t.Errorf("line %d:\n got %+v\nwant %+v", i, maps[i], want[i])
		}
	}
	if !maps[0].IsFile() || maps[2].IsFile() || maps[7].IsFile() || !maps[1].Executable() || maps[0].Executable() {
		t.Errorf("IsFile/Executable wrong")
	}
	// The pause-time scan sees the same ranges.
	r := ScanRanges([]byte(text), nil)
	for i, m := range want {
		if i >= len(r) || r[i] != (Range{Start: m.Start, End: m.End}) {
			t.Fatalf("scanRanges: %v", r)
		}
		if got, ok := FindRange(r, m.End-1); !ok || got.Start != m.Start {
			t.Errorf("FindRange(%#x) = %v %v", m.End-1, got, ok)
		}
	}
	if _, ok := FindRange(r, 0x7f1e2c021000); ok {
		t.Errorf("findRange found a hole")
	}

	for _, bad := range []string{
		"zz-1000 r-xp 00000000 00:00 0",
		"1000 r-xp 00000000 00:00 0",
		"2000-1000 r-xp 00000000 00:00 0",
		"1000-2000 r-x 00000000 00:00 0",
		"1000-2000 r-xp 0000g000 00:00 0",
		"1000-2000 r-xp 00000000 0000 0",
		"1000-2000 r-xp 00000000 00:00 x",
	} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%q) succeeded", bad)
		}
	}
}

// TestReadMapsSelf maps files with awkward names (and one deleted after
// mapping) and anonymous memory into this process and finds them in
// ReadMaps(own pid) with the right names, inodes and devices.
func TestReadMapsSelf(t *testing.T) {
	dir := t.TempDir()
	mapFile := func(name string) ([]byte, *syscall.Stat_t) {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, make([]byte, 8192), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b, err := unix.Mmap(int(f.Fd()), 4096, 4096, unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Munmap(b) })
		var st syscall.Stat_t
		syscall.Fstat(int(f.Fd()), &st)
		return b, &st
	}
	spaced, spacedSt := mapFile("with  two spaces (and parens)")
	gone, goneSt := mapFile("gone")
	os.Remove(filepath.Join(dir, "gone"))
	anon, err := unix.Mmap(-1, 0, 3*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(anon)
	unix.Mprotect(anon[4096:8192], unix.PROT_READ) // its own mapping, apart from neighbours

	maps, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	at := func(b []byte) *target.Mapping {
		m := Find(maps, uint64(uintptr(unsafe.Pointer(&b[0]))))
		if m == nil {
			t.Fatalf("no mapping at %p", &b[0])
		}
		return m
	}
	dev := func(st *syscall.Stat_t) string {
		return fmt.Sprintf("%02x:%02x", unix.Major(st.Dev), unix.Minor(st.Dev))
	}
	if m := at(spaced); m.Path != filepath.Join(dir, "with  two spaces (and parens)") || m.Deleted || m.Offset != 4096 ||
		m.Perms != "r--s" || m.Inode != spacedSt.Ino || m.Dev != dev(spacedSt) || m.End-m.Start != 4096 {
		t.Errorf("spaced file: %+v (inode %d dev %s)", *m, spacedSt.Ino, dev(spacedSt))
	}
	if m := at(gone); m.Path != filepath.Join(dir, "gone") || !m.Deleted || m.Inode != goneSt.Ino {
		t.Errorf("deleted file: %+v", *m)
	}
	if m := at(anon[4096:]); m.Path != "" || m.Inode != 0 || m.Perms != "r--p" || m.End-m.Start != 4096 {
		t.Errorf("anonymous: %+v", *m)
	}
	special := map[string]bool{}
	for _, m := range maps {
		special[m.Path] = true
	}
	for _, p := range []string{"[stack]", "[vdso]", "[heap]"} {
		if !special[p] && p != "[heap]" { // a Go binary may have no [heap]
			t.Errorf("no %s mapping", p)
		}
	}
}

// TestParseEscapedNewline: the kernel prints a newline in a file name as
// \012; the path must come back as the file's real name.
func TestParseEscapedNewline(t *testing.T) {
	maps, err := Parse([]byte(`7f1e2d000000-7f1e2d001000 r-xp 00001000 08:02 42                         /tmp/a\012b.so` + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(maps) != 1 || maps[0].Path != "/tmp/a\nb.so" {
		t.Fatalf("got %+v", maps)
	}
}

// TestReadMapsNewlineName maps a file whose name holds a newline and finds
// it, by its real name, in this process's maps.
func TestReadMapsNewlineName(t *testing.T) {
	path := filepath.Join(t.TempDir(), "new\nline")
	if err := os.WriteFile(path, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(b)
	maps, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	m := Find(maps, uint64(uintptr(unsafe.Pointer(&b[0]))))
	if m == nil || m.Path != path {
		t.Fatalf("mapping %+v, want path %q", m, path)
	}
	if _, err := os.Stat(m.Path); err != nil {
		t.Errorf("the decoded path cannot be opened: %v", err)
	}
}
