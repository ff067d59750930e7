package dump

import (
	"errors"
	"os"
	"testing"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/internal/procmaps"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/target"
)

// TestEarlySettle: an object opened before the capture is kept when its
// first mapping is the same in the snapshot, and opened again (by the
// snapshot's mappings) when it moved, was replaced or is gone.
func TestEarlySettle(t *testing.T) {
	before := []target.Mapping{
		{Start: 0x1000, End: 0x2000, Path: "/same", Perms: "r-xp", Inode: 1},
		{Start: 0x3000, End: 0x4000, Path: "/moved", Perms: "r-xp", Inode: 2},
		{Start: 0x5000, End: 0x6000, Path: "/replaced", Perms: "r-xp", Inode: 3},
		{Start: 0x7000, End: 0x8000, Path: "/gone", Perms: "r-xp", Inode: 4},
	}
	after := []target.Mapping{
		before[0],
		{Start: 0x9000, End: 0xa000, Path: "/moved", Perms: "r-xp", Inode: 2},
		{Start: 0x5000, End: 0x6000, Path: "/replaced", Perms: "r-xp", Inode: 33},
	}
	objs := &target.Objects{}
	var opened []string
	objs.Open = func(path string) (*elfobj.File, error) {
		opened = append(opened, path)
		return nil, errors.New("not opened in this test")
	}
	e := &earlyOpen{pid: os.Getpid(), maps: before, open: before}
	first := map[string]*target.Module{}
	for _, m := range before {
		first[m.Path] = objs.Module(m.Path)
	}
	e.captured()
	e.settle(&live.Snapshot{Maps: after}, objs)
	for path, kept := range map[string]bool{"/same": true, "/moved": false, "/replaced": false, "/gone": false} {
		if got := objs.Module(path) == first[path]; got != kept {
			t.Errorf("%s: module kept %v, want %v", path, got, kept)
		}
	}
	if len(opened) != 7 {
		t.Errorf("opened %q, want the 4 early and 3 again", opened)
	}
	if e.open[1].Start != 0x9000 {
		t.Errorf("objects are not opened by the snapshot's mappings after settle")
	}
}

// TestThreadPCs reads this process's threads: each PC found is in an
// executable mapping (threads not blocked in the kernel give none).
func TestThreadPCs(t *testing.T) {
	maps, err := procmaps.Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	space := target.NewAddressSpace(maps, nil)
	for _, pc := range threadPCs(os.Getpid()) {
		if m := space.Find(pc); m == nil || !m.Executable() {
			t.Errorf("PC %#x is in no executable mapping (%v)", pc, m)
		}
	}
	if threadPCs(-1) != nil {
		t.Errorf("threadPCs of no process is not nil")
	}
}
