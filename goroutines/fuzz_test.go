package goroutines

import (
	"encoding/binary"
	"testing"

	"github.com/rewindstack/rewind/internal/goruntime"
	"github.com/rewindstack/rewind/internal/testutil/fuzzcorpus"
	"github.com/rewindstack/rewind/target"
)

const fuzzBase = 0x10000

// fuzzMemory is a process image made of data at fuzzBase: runtime.allgs's
// header first, then whatever the header points to.
func fuzzRead(t *testing.T, data []byte) *snapshot { return fuzzReadVersion(t, data, "go1.26.8") }

func fuzzReadVersion(t *testing.T, data []byte, version string) *snapshot {
	lay, err := goruntime.ForVersion(version)
	if err != nil {
		t.Fatal(err)
	}
	lay.AllGs = fuzzBase
	mem := &target.Snapshot{Regions: []target.Region{{Addr: fuzzBase, Data: data}}}
	s, _ := readAll(memBatch{mem}, lay, 0, nil)
	return s
}

// FuzzReadAll: whatever the target's memory holds (a corrupt core, a g
// torn mid-update), reading goroutines never panics, hangs or allocates
// without bound, and keeps only goroutines that pass the consistency
// checks.
func FuzzReadAll(f *testing.F) {
	f.Add(oneGoroutine())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		s := fuzzRead(t, data)
		if s == nil {
			return
		}
		for _, g := range s.gs {
			if g.torn() != "" {
				t.Fatalf("kept a torn g: %+v", g)
			}
		}
	})
}

// FuzzReadAllMap is FuzzReadAll with Go 1.22's layout, whose pprof labels
// are a hash map.
func FuzzReadAllMap(f *testing.F) {
	f.Add(oneGoroutine())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		if s := fuzzReadVersion(t, data, "go1.22.12"); s != nil {
			for _, g := range s.gs {
				if g.torn() != "" {
					t.Fatalf("kept a torn g: %+v", g)
				}
			}
		}
	})
}

// oneGoroutine builds an image with one waiting goroutine, its stack and a
// pprof label.
func oneGoroutine() []byte {
	lay, _ := goruntime.ForVersion("go1.26.8")
	o := lay.G
	img := make([]byte, 0x3000)
	put := func(off int, v uint64) { binary.LittleEndian.PutUint64(img[off:], v) }
	const gOff, ptrsOff, stackOff, labOff = 0x100, 0x80, 0x1000, 0x800
	put(0, fuzzBase+ptrsOff) // allgs.ptr
	put(8, 1)                // allgs.len
	put(ptrsOff, fuzzBase+gOff)
	g := gOff
	put(g+o.StackLo, fuzzBase+stackOff)
	put(g+o.StackHi, fuzzBase+stackOff+0x1000)
	put(g+o.SchedSP, fuzzBase+stackOff+0xf00)
	put(g+o.SchedPC, 0x401000)
	put(g+o.Status, gWaiting)
	put(g+o.Goid, 7)
	img[g+o.WaitReason] = 19 // chan receive in go1.26
	put(g+o.Labels, fuzzBase+labOff)
	put(labOff, fuzzBase+labOff+0x20) // labels slice: one pair
	put(labOff+8, 1)
	put(labOff+0x20, fuzzBase+labOff+0x60)
	put(labOff+0x28, 1)
	put(labOff+0x30, fuzzBase+labOff+0x61)
	put(labOff+0x38, 1)
	img[labOff+0x60], img[labOff+0x61] = 'k', 'v'
	return img
}

// TestReadImage reads the synthetic image: one goroutine with its stack
// and label.
func TestReadImage(t *testing.T) {
	s := fuzzRead(t, oneGoroutine())
	if s == nil || len(s.gs) != 1 {
		t.Fatalf("read %+v", s)
	}
	g := s.gs[0]
	if g.goid != 7 || g.status != gWaiting || len(g.stack.Data) != 0x100 || g.labels["k"] != "v" {
		t.Errorf("goroutine %+v", g)
	}
}

// TestWriteCorpus regenerates FuzzReadAll's committed seeds.
func TestWriteCorpus(t *testing.T) {
	write := fuzzcorpus.Regenerate(t, "FuzzReadAll")
	write("one-goroutine", oneGoroutine())
	write("empty", []byte{})
	writeMap := fuzzcorpus.Regenerate(t, "FuzzReadAllMap")
	writeMap("one-goroutine", oneGoroutine())
	writeMap("empty", []byte{})
}
