package live

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/internal/procmaps"
	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/target"
)

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
	s := &Snapshot{PID: os.Getpid(), Maps: []target.Mapping{{Start: 0x1000, End: 0x2000, Path: exe, Inode: ino}}}
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
	s.ranges = []procmaps.Range{{Start: base, End: base + 3*page}, {Start: bigBase, End: bigBase + uint64(len(big))}}
	if s.ranges[1].Start < s.ranges[0].End {
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
