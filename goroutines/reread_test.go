package goroutines

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/rewindstack/rewind/internal/goruntime"
	"github.com/rewindstack/rewind/target"
)

// image is a synthetic process memory at fuzzBase for one Go version's
// layout: allgs's header at 0, its pointer array at ptrsOff, gs at gOff
// (gStride apart), their stacks at stackOff (stackSize each, the used part
// from stackUsed below the top), label sets at labOff.
type image struct {
	lay *goruntime.Layout
	mem []byte
}

const (
	ptrsOff, ptrsOff2 = 0x100, 0x200
	gOff, gStride     = 0x1000, 0x200
	stackOff          = 0x8000
	stackSize         = 0x1000
	stackUsed         = 0x100
	labOff            = 0x18000
	imageSize         = 0x20000
)

func newImage(t *testing.T, version string, n int) *image {
	lay, err := goruntime.ForVersion(version)
	if err != nil {
		t.Fatal(err)
	}
	lay.AllGs = fuzzBase
	im := &image{lay: lay, mem: make([]byte, imageSize)}
	im.put(0, fuzzBase+ptrsOff)
	im.put(8, uint64(n))
	for i := 0; i < n; i++ {
		im.put(ptrsOff+8*i, fuzzBase+gOff+uint64(i*gStride))
		im.park(i, int64(10+i), 0x401000+uint64(i), 1000)
		im.setStack(i, byte(i))
	}
	return im
}

func (im *image) put(off int, v uint64) { binary.LittleEndian.PutUint64(im.mem[off:], v) }

func (im *image) g(i int) int { return gOff + i*gStride }

// park makes g i a goroutine goid waiting on a channel at pc, with
// waitsince since (0: no collection has seen it blocked yet).
func (im *image) park(i int, goid int64, pc uint64, since int64) {
	o, g := &im.lay.G, im.g(i)
	lo := fuzzBase + stackOff + uint64(i*stackSize)
	im.put(g+o.StackLo, lo)
	im.put(g+o.StackHi, lo+stackSize)
	im.put(g+o.SchedSP, lo+stackSize-stackUsed)
	im.put(g+o.SchedPC, pc)
	im.put(g+o.Status, gWaiting)
	im.put(g+o.Goid, uint64(goid))
	im.put(g+o.WaitSince, uint64(since))
	im.mem[g+o.WaitReason] = 7
	im.put(g+o.GoPC, 0x402000)
	im.put(g+o.StartPC, 0x403000)
}

// setStack fills the used part of g i's stack with b.
func (im *image) setStack(i int, b byte) {
	top := stackOff + (i+1)*stackSize
	for k := top - stackUsed; k < top; k++ {
		im.mem[k] = b
	}
}

// label gives g i the label set {key: val} (at label slot k).
func (im *image) label(i, k int, key, val string) {
	o := &im.lay.G
	set := labOff + k*0x100
	im.put(im.g(i)+o.Labels, fuzzBase+uint64(set))
	im.put(set, fuzzBase+uint64(set)+0x20)
	im.put(set+8, 1)
	im.put(set+0x20, fuzzBase+uint64(set)+0x60)
	im.put(set+0x28, uint64(len(key)))
	im.put(set+0x30, fuzzBase+uint64(set)+0x80)
	im.put(set+0x38, uint64(len(val)))
	copy(im.mem[set+0x60:], key)
	copy(im.mem[set+0x80:], val)
}

func (im *image) reader() batchReader {
	return memBatch{&target.Snapshot{Regions: []target.Region{{Addr: fuzzBase, Data: im.mem}}}}
}

// describe prints what a dump shows of the goroutines read.
func describe(s *snapshot) string {
	gs := slices.Clone(s.gs)
	slices.SortFunc(gs, func(a, b raw) int { return cmp.Compare(a.goid, b.goid) })
	var b bytes.Buffer
	for _, g := range gs {
		fmt.Fprintf(&b, "%+v tid=%d cut=%v stack=%#x:%x labels=%v\n", g.gFields, g.tid, g.stackCut,
			g.stack.Addr, g.stack.Data, slices.Sorted(maps.Keys(g.labels)))
		for _, k := range slices.Sorted(maps.Keys(g.labels)) {
			fmt.Fprintf(&b, "  %s=%s\n", k, g.labels[k])
		}
	}
	return b.String()
}

// TestReadAgain: the read in the pause, which keeps the copies of the
// read before it for goroutines that have not run since, gives the same
// goroutines, stacks and labels as reading everything again, whatever
// happened in between: goroutines that ran, exited, were created in a
// dead g or a new slot, changed labels, or allgs replaced.
func TestReadAgain(t *testing.T) {
	type scenario struct {
		name   string
		change func(im *image)
		kept   int  // goroutines whose copy is kept
		again  bool // readAgain (not readAll's own path) reads it
	}
	const n = 8
	scenarios := []scenario{
		{"unchanged", func(im *image) {}, n, true},
		{"ran and parked elsewhere", func(im *image) {
			o := &im.lay.G
			im.put(im.g(1)+o.SchedSP, binary.LittleEndian.Uint64(im.mem[im.g(1)+o.SchedSP:])-8)
			im.put(im.g(1)+o.WaitSince, 0)
			im.setStack(1, 0xee)
		}, n - 1, true},
		{"ran and parked at the same place", func(im *image) {
			im.put(im.g(2)+im.lay.G.WaitSince, 0)
			im.setStack(2, 0xdd)
		}, n - 1, true},
		{"seen by a later collection", func(im *image) {
			im.put(im.g(2)+im.lay.G.WaitSince, 2000)
			im.setStack(2, 0xcc)
		}, n - 1, true},
		{"exited", func(im *image) {
			im.put(im.g(3)+im.lay.G.Status, gDead)
		}, n - 1, true},
		{"created in a dead g", func(im *image) {
			im.park(3, 99, 0x401500, 0)
			im.setStack(3, 0x99)
		}, n - 1, true},
		{"created in a new slot", func(im *image) {
			im.put(8, n+1)
			im.put(ptrsOff+8*n, fuzzBase+uint64(im.g(n)))
			im.park(n, 100, 0x401600, 0)
			im.setStack(n, 0x42)
		}, n, true},
		{"labels set while running", func(im *image) {
			im.put(im.g(4)+im.lay.G.WaitSince, 0)
			im.label(4, 1, "k", "new")
		}, n - 1, true},
		{"an unrelated field in the window", func(im *image) {
			im.put(im.g(5)+im.lay.G.Goid+8, 0x1234) // g.schedlink
		}, n, true},
		{"allgs grown elsewhere", func(im *image) {
			copy(im.mem[ptrsOff2:], im.mem[ptrsOff:ptrsOff+8*n])
			im.put(0, fuzzBase+ptrsOff2)
			im.put(8, n+1)
			im.put(ptrsOff2+8*n, fuzzBase+uint64(im.g(n)))
			im.park(n, 100, 0x401600, 1000)
		}, n, true},
		{"not yet seen by a collection, ran and parked at the same place", func(im *image) {
			// Only its run counter (g.trackingSeq, past the window) tells.
			im.mem[im.g(0)+validityWindow(&im.lay.G)+3]++
			im.setStack(0, 0xbb)
		}, n - 1, true},
		{"not yet seen by a collection, ran and parked elsewhere", func(im *image) {
			o := &im.lay.G
			im.put(im.g(0)+o.SchedPC, 0x401abc)
			im.setStack(0, 0xba)
		}, n - 1, true},
		{"allgs not what it was", func(im *image) {
			im.put(ptrsOff+8*6, fuzzBase+uint64(im.g(n)))
			im.park(n, 101, 0x401700, 1000)
		}, n - 2, false},
	}
	defer func(b int) { batchBytes = b }(batchBytes)
	for _, batch := range []int{batchBytes, 3 * gStride} { // all gs at once, or a few at a time
		for _, version := range []string{"go1.26.8", "go1.23.12"} {
			for _, sc := range scenarios {
				batchBytes = batch
				t.Run(fmt.Sprintf("%s/batch%d/%s", version, batch, sc.name), func(t *testing.T) {
					im := newImage(t, version, n)
					im.put(im.g(0)+im.lay.G.WaitSince, 0) // no collection has seen it parked
					if !im.lay.Labels.Map {
						im.label(4, 0, "k", "old")
					}
					pre, err := preRead(im.reader(), im.lay, 0)
					if err != nil {
						t.Fatal(err)
					}
					pre.prepareReuse(im.lay.G.Size)
					if pre.again == nil {
						t.Fatal("no plan")
					}
					sc.change(im)
					got, err := readAll(im.reader(), im.lay, 0, pre)
					if err != nil {
						t.Fatal(err)
					}
					if again := got.prevGs != nil; again != sc.again {
						t.Errorf("read again: %v, want %v", again, sc.again)
					}
					got.merge()
					want, err := readAll(im.reader(), im.lay, 0, nil)
					if err != nil {
						t.Fatal(err)
					}
					if g, w := describe(got), describe(want); g != w {
						t.Errorf("read in the pause:\n%s\nread anew:\n%s", g, w)
					}
					if got.kept != sc.kept {
						t.Errorf("%d goroutines kept, want %d", got.kept, sc.kept)
					}
					if batchBytes < n*gStride && len(pre.again.batches) < 2 {
						t.Errorf("%d batches of %d bytes", len(pre.again.batches), batchBytes)
					}
				})
			}
		}
	}
}
