package live

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/internal/fixture"
	"github.com/rewindstack/rewind/regs"
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
	maps, err := parseMaps([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	want := []Mapping{
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
	r := scanRanges([]byte(text), nil)
	for i, m := range want {
		if i >= len(r) || r[i] != (mapRange{m.Start, m.End}) {
			t.Fatalf("scanRanges: %v", r)
		}
		if got, ok := findRange(r, m.End-1); !ok || got.start != m.Start {
			t.Errorf("findRange(%#x) = %v %v", m.End-1, got, ok)
		}
	}
	if _, ok := findRange(r, 0x7f1e2c021000); ok {
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
		if _, err := parseMaps([]byte(bad)); err == nil {
			t.Errorf("parseMaps(%q) succeeded", bad)
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

	maps, err := ReadMaps(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	at := func(b []byte) *Mapping {
		m := findMapping(maps, uint64(uintptr(unsafe.Pointer(&b[0]))))
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

// TestOpenObjectDeleted runs a copy of a fixture program, deletes the copy
// and replaces it by another program: OpenObject still opens the mapped
// file, through /proc/PID/map_files.
func TestOpenObjectDeleted(t *testing.T) {
	needAMD64(t)
	orig := fixture.Build(t, "threads", fixture.Variants[3])
	other := fixture.Build(t, "recurse", fixture.Variants[3])
	path := filepath.Join(t.TempDir(), "threads copy")
	b, err := os.ReadFile(orig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	tg := startTarget(t, false, path)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	s := mustCapture(t, tg.pid, Options{MaxStack: -1})
	found := false
	for _, m := range s.Maps {
		if m.Path == path {
			found = true
			if !m.Deleted {
				t.Errorf("mapping %+v not marked deleted", m)
			}
		}
	}
	if !found || s.Exe != path {
		t.Fatalf("no mapping of %q (Exe %q)", path, s.Exe)
	}
	want := buildID(t, orig)
	f, err := s.OpenObject(path)
	if err != nil {
		t.Fatalf("OpenObject of the deleted file: %v", err)
	}
	if f.BuildIDHex() != want || f.Path != path {
		t.Errorf("opened %q with build-id %s, want %s", f.Path, f.BuildIDHex(), want)
	}
	f.Close()

	// Another file at the same path now: map_files still leads to the
	// mapped one.
	ob, _ := os.ReadFile(other)
	if err := os.WriteFile(path, ob, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err = s.OpenObject(path)
	if err != nil || f.BuildIDHex() != want {
		t.Errorf("after replacing the file: %v, build-id %v, want %s", err, f, want)
	}
	if _, err := s.OpenObject("/no/such/object"); err == nil {
		t.Errorf("OpenObject of an unmapped path succeeded")
	}
}

// TestOpenObjectFallbacks checks the path fallbacks used when map_files
// cannot be opened (here: a mapping that does not exist): the file is
// opened by path only if it is the mapped inode.
func TestOpenObjectFallbacks(t *testing.T) {
	needAMD64(t)
	exe := fixture.Build(t, "threads", fixture.Variants[3])
	st, err := os.Stat(exe)
	if err != nil {
		t.Fatal(err)
	}
	ino := st.Sys().(*syscall.Stat_t).Ino
	s := &Snapshot{PID: os.Getpid(), Maps: []Mapping{{Start: 0x1000, End: 0x2000, Path: exe, Inode: ino}}}
	f, err := s.OpenObject(exe)
	if err != nil || f.BuildIDHex() != buildID(t, exe) {
		t.Fatalf("OpenObject by path: %v", err)
	}
	f.Close()
	s.Maps[0].Inode = ino + 1
	if _, err := s.OpenObject(exe); err == nil || !strings.Contains(err.Error(), "replaced") {
		t.Errorf("OpenObject of a file with another inode: %v, want a replaced-file error", err)
	}
	s.Maps[0].Deleted = true
	if _, err := s.OpenObject(exe); err == nil || !strings.Contains(err.Error(), "deleted") {
		t.Errorf("OpenObject of a deleted mapping without map_files: %v", err)
	}
}

func buildID(t *testing.T, path string) string {
	t.Helper()
	f, err := elfobj.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.BuildIDHex() == "" {
		t.Fatalf("%s has no build-id", path)
	}
	return f.BuildIDHex()
}

// TestCopyStacksPartial runs the stack copy against this process with
// made-up threads: one whose "stack" runs into an unreadable page, which
// must keep what precedes it and not stop the copy of the next thread,
// and one larger than the prepared buffer.
func TestCopyStacksPartial(t *testing.T) {
	const page = 4096
	mem, err := unix.Mmap(-1, 0, 3*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	big := make([]byte, 40<<10)
	for i := range mem {
		mem[i] = byte(i * 7)
	}
	for i := range big {
		big[i] = byte(i * 13)
	}
	if err := unix.Mprotect(mem[page:2*page], unix.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	base := uint64(uintptr(unsafe.Pointer(&mem[0])))
	bigBase := uint64(uintptr(unsafe.Pointer(&big[0])))
	s := &session{pid: os.Getpid(), maxStack: DefaultMaxStack, scratch: touch(make([]byte, 8<<10))}
	thread := func(tid int, sp uint64) *tstate {
		th := &tstate{tid: tid, stopped: true, attached: true, regs: regs.New(regs.AMD64)}
		th.regs.Set(regs.AMD64RSP, sp)
		s.threads = append(s.threads, th)
		return th
	}
	a := thread(os.Getpid(), base+256)      // runs into the PROT_NONE page
	b := thread(os.Getpid()+1, bigBase+256) // 40 KiB: more than the scratch
	// One range over all three pages, as if it were one mapping.
	s.ranges = []mapRange{{base, base + 3*page}, {bigBase, bigBase + uint64(len(big))}}
	if s.ranges[1].start < s.ranges[0].end {
		s.ranges[0], s.ranges[1] = s.ranges[1], s.ranges[0]
	}
	s.copyStacks()
	if a.stack.Addr != base+256-redZone || !bytes.Equal(a.stack.Data, mem[256-redZone:page]) {
		t.Errorf("thread a: %d bytes at %#x, want the %d readable bytes at %#x", len(a.stack.Data), a.stack.Addr, page-256+redZone, base+256-redZone)
	}
	if b.stack.Addr != bigBase+256-redZone || !bytes.Equal(b.stack.Data, big[256-redZone:]) {
		t.Errorf("thread b: %d bytes at %#x, want %d at %#x", len(b.stack.Data), b.stack.Addr, len(big)-256+redZone, bigBase+256-redZone)
	}
	runtime.KeepAlive(big)
}
