package ruby

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/testutil/fuzzcorpus"
	"github.com/rewindstack/rewind/target"
)

// imageBase is where a synthetic image lies in its address space.
const imageBase = 0x10000

// image is a synthetic process memory of imageBase+len(b) bytes.
type image []byte

func (m image) ReadMemory(addr uint64, p []byte) error {
	if addr < imageBase || addr-imageBase > uint64(len(m)) || uint64(len(p)) > uint64(len(m))-(addr-imageBase) {
		return &target.MemoryError{Addr: addr}
	}
	copy(p, m[addr-imageBase:])
	return nil
}

// Addresses of the objects of the image newImage builds, as offsets.
const (
	oVMPtr   = 0x000
	oVM      = 0x040
	oRactor  = 0x080 // its thread list at +304
	oThread  = 0x200
	oEC      = 0x280
	oStack   = 0x300 // VM stack: 64 VALUEs, control frames at its end
	oEP0     = 0x310 // the C frame's ep (its method entry at -16)
	oEP1     = 0x330
	oEP2     = 0x350
	oCFP     = 0x500 - 3*64
	oIseq    = 0x500
	oBody    = 0x540
	oPath    = 0x600
	oLabel   = 0x640
	oInsns   = 0x680
	oSucc    = 0x6c0
	oME      = 0x700
	oDef     = 0x740
	oSymbols = 0x780
	oIDs     = 0x7c0
	oChunk   = 0x800
	oChunkEl = 0x840
	oGets    = 0x9c0
	imageLen = 0xa00
	// The C method's ID: serial 20, above the operators.
	getsSerial = 20
	getsID     = getsSerial<<4 | 1
)

// newImage builds a Ruby 3.1 VM with one thread, whose stack is the C
// method gets called from rb_c at line 7 of /x/park.rb, and the runtime
// that reads it.
func newImage() (image, *Runtime) {
	m := make(image, imageLen)
	put := func(off, v uint64) { binary.LittleEndian.PutUint64(m[off:], v) }
	put32 := func(off uint64, v uint32) { binary.LittleEndian.PutUint32(m[off:], v) }
	a := func(off uint64) uint64 { return imageBase + off }
	str := func(off uint64, s string) {
		put(off, tString|uint64(len(s))<<(flUShift+2))
		copy(m[off+16:], s)
	}
	l := &layout31
	put(oVMPtr, a(oVM))
	put(oVM+l.vmMainRactor, a(oRactor))
	put(oVM+l.vmMainThread, a(oThread))
	put(oRactor+304, a(oThread))   // the list head: next
	put(oRactor+304+8, a(oThread)) // and prev
	put(oThread, a(oRactor+304))   // lt_node.next: back to the head
	put(oThread+thRactor, a(oRactor))
	put(oThread+thVM, a(oVM))
	put(oThread+l.thEC, a(oEC))
	put(oThread+l.thPthread, 0x7f0000001000)
	put32(oThread+uint64(l.thTID), 4242)
	put(oEC+l.ecStack, a(oStack))
	put(oEC+l.ecStackSize, (0x500-oStack)/8)
	put(oEC+l.ecCFP, a(oCFP))
	// The C frame, the method frame (it entered the activation), the
	// VM's top frame.
	put(oCFP+l.cfpEP, a(oEP0))
	put(oEP0, magicCFunc|flagCFrame)
	put(oEP0-16, a(oME))
	put(oCFP+64+l.cfpPC, a(oBody+0x100)+5*8) // pos 4 after the decrement
	put(oCFP+64+l.cfpIseq, a(oIseq))
	put(oCFP+64+l.cfpEP, a(oEP1))
	put(oEP1, 0x11110001|flagFinish)
	put(oCFP+128+l.cfpEP, a(oEP2))
	put(oEP2, 0x79990001|flagCFrame)
	put(oIseq, tImemo|imemoIseq<<flUShift)
	put(oIseq+l.iseqBody, a(oBody))
	put32(oBody+4, 10) // iseq_size
	put(oBody+l.bodyEncoded, a(oBody+0x100))
	put(oBody+l.bodyPath, a(oPath))
	put(oBody+l.bodyLabel, a(oLabel))
	put(oBody+l.bodyInsns, a(oInsns))
	put32(oBody+l.bodyInsnsSize, 2)
	put(oBody+l.bodySucc, a(oSucc))
	str(oPath, "/x/park.rb")
	str(oLabel, "rb_c")
	put32(oInsns, 5)             // entry 0: line 5 from position 0
	put32(oInsns+l.insnEntry, 7) // entry 1: line 7 from position 3
	var imm uint64               // ranks of positions 0-8: 1, 1, 1, 2, 2...
	for i := uint64(0); i < 9; i++ {
		r := uint64(1)
		if i >= 3 {
			r = 2
		}
		imm |= r << (7 * i)
	}
	put(oSucc, imm)
	put(oME, tImemo|imemoMent<<flUShift)
	put(oME+l.meDef, a(oDef))
	put(oDef+l.defOriginalID, getsID)
	put(oSymbols, 1000) // last_id
	put(oSymbols+16, a(oIDs))
	put(oIDs, tArray|flUser1|1<<arrEmbedLen) // embedded, one chunk
	put(oIDs+16, a(oChunk))
	put(oChunk, tArray)
	put(oChunk+16, 2*getsSerial+2)
	put(oChunk+32, a(oChunkEl))
	put(oChunkEl+8*2*getsSerial, a(oGets))
	str(oGets, "gets")
	return m, &Runtime{Version: "3.1.2", VMPtr: a(oVMPtr), Symbols: a(oSymbols), l: l, lastOpID: l.lastOpID, idShift: l.idScopeShift}
}

// show is the frames and end of every thread of s, one line each.
func show(s *Stacks) string {
	var b strings.Builder
	for _, th := range s.Threads {
		fmt.Fprintf(&b, "thread %d %#x:", th.TID, th.Pthread)
		for _, f := range th.Frames {
			fmt.Fprintf(&b, " %s@%s:%d/%d", f.Label, f.Path, f.Line, f.Activation)
		}
		if th.End != "" {
			fmt.Fprintf(&b, " end %s", th.End)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TestImage: the synthetic VM's thread is read as built: the C method
// named from the symbol table with its caller's place, the method's
// line from the succinct index.
func TestImage(t *testing.T) {
	m, rt := newImage()
	s, err := rt.Read(m)
	if err != nil {
		t.Fatal(err)
	}
	want := "thread 4242 0x7f0000001000: gets@/x/park.rb:7/0 rb_c@/x/park.rb:7/0\n"
	if got := show(s); got != want {
		t.Errorf("got  %swant %s", got, want)
	}
}

// TestCorrupt: a damaged VM ends each walk with a reason, the frames
// read before it kept, and shows no name that is not one.
func TestCorrupt(t *testing.T) {
	l := &layout31
	for _, tc := range []struct {
		name string
		edit func(m image)
		want string // in show's output, or the error
	}{
		{"thread-loop", func(m image) { le(m, oRactor+304, imageBase+oRactor+304) }, "thread list of ractor"},
		{"not-main-thread", func(m image) { le(m, oThread+thVM, 0) }, "is not one of its main ractor"},
		{"null-thread-link", func(m image) { le(m, oThread, 0) }, "a null link"},
		{"no-vm", func(m image) { le(m, oVMPtr, 0) }, "<nil>"},
		{"vm-unreadable", func(m image) { le(m, oVMPtr, 0xdead0000) }, "the VM at 0xdead0000"},
		{"cfp-misaligned", func(m image) { le(m, oEC+l.ecCFP, imageBase+oCFP+8) }, "end bad-cfp"},
		{"cfp-outside", func(m image) { le(m, oEC+l.ecCFP, imageBase+0x10) }, "end bad-cfp"},
		{"huge-stack", func(m image) { le(m, oEC+l.ecStackSize, 1<<40) }, "end bad-cfp"},
		{"ep-unreadable", func(m image) { le(m, oCFP+64+l.cfpEP, 0xdead0000) }, "gets@:0/0 end unreadable"},
		{"not-iseq", func(m image) { le(m, oIseq, tString) }, "gets@:0/0 end not-iseq"},
		{"label-escape", func(m image) { m[oLabel+16] = 0x1b }, "@/x/park.rb:7/0\n"},
		{"label-long", func(m image) { le(m, oLabel, tString|flUser1); le(m, oLabel+16, 1<<20) }, " @/x/park.rb:7/0\n"},
		{"bad-symbols", func(m image) { le(m, oIDs, tString) }, "thread 4242 0x7f0000001000: @/x/park.rb:7/0 rb_c"},
		{"id-past-last", func(m image) { le(m, oSymbols, 3) }, ": @/x/park.rb:7/0 rb_c"},
		{"succ-unreadable", func(m image) { le(m, oBody+l.bodySucc, 0xdead0000) }, "rb_c@/x/park.rb:0/0"},
		{"line-past-size", func(m image) { binary.LittleEndian.PutUint32(m[oBody+4:], 2) }, "rb_c@/x/park.rb:0/0"},
	} {
		m, rt := newImage()
		tc.edit(m)
		s, err := rt.Read(m)
		got := fmt.Sprint(err)
		if s != nil {
			got += "\n" + show(s)
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("%s: got %s, want %q in it", tc.name, got, tc.want)
		}
	}
}

func le(m image, off, v uint64) { binary.LittleEndian.PutUint64(m[off:], v) }

// TestSuccinctRank: the succinct index gives, for every position, the
// number of entries starting at or before it, across the immediate
// part and several blocks (a table encoded here as iseq.c encodes it).
func TestSuccinctRank(t *testing.T) {
	starts := []uint64{0, 2, 9, 53, 54, 60, 117, 118, 565, 566, 600, 1100, 1201}
	const maxPos = 1300
	imm := make([]uint64, immWords)
	blocks := (maxPos - immTable + 511) / 512
	m := make(image, immWords*8+blocks*blockSize)
	r := uint64(0)
	for j := 0; j < immWords; j++ {
		for i := 0; i < 9; i++ {
			if r < uint64(len(starts)) && starts[r] == uint64(j*9+i) {
				r++
			}
			imm[j] |= r << (7 * i)
		}
		le(m, uint64(j*8), imm[j])
	}
	for k := 0; k < blocks; k++ {
		off := uint64(immWords*8 + k*blockSize)
		binary.LittleEndian.PutUint32(m[off:], uint32(r))
		var small, smallRanks uint64
		for j := 0; j < 8; j++ {
			if j > 0 {
				smallRanks |= small << (9 * (j - 1))
			}
			var bitsw uint64
			for i := 0; i < 64; i++ {
				if r < uint64(len(starts)) && starts[r] == uint64(k*512+j*64+i+immTable) {
					bitsw |= 1 << i
					r++
					small++
				}
			}
			le(m, off+16+uint64(j)*8, bitsw)
		}
		le(m, off+8, smallRanks)
	}
	w := &walker{l: &layout31, mem: m, c: newCache(), pages: map[uint64][]byte{}, deadline: time.Now().Add(time.Minute)}
	for x := uint64(0); x < maxPos; x++ {
		want := uint64(0)
		for _, s := range starts {
			if s <= x {
				want++
			}
		}
		got, ok := w.succRank(imageBase, x)
		if !ok || got != want {
			t.Fatalf("rank(%d) = %d, %v; want %d", x, got, ok, want)
		}
	}
}

// FuzzRead: any bytes as the VM's memory are walked in bounded time and
// give only printable names.
func FuzzRead(f *testing.F) {
	m, _ := newImage()
	f.Add([]byte(m))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, rt := newImage()
		start := time.Now()
		s, _ := rt.Read(image(b))
		if d := time.Since(start); d > 3*maxWalkTime {
			t.Errorf("walk took %v", d)
		}
		if s == nil {
			return
		}
		for _, th := range s.Threads {
			for _, fr := range th.Frames {
				for _, n := range []string{fr.Label, fr.Path} {
					if len(n) > maxString || printable([]byte(n)) != n {
						t.Errorf("name %q", n)
					}
				}
			}
		}
	})
}

// TestWriteCorpus regenerates FuzzRead's seeds (REWIND_WRITE_CORPUS=1):
// the image, and it damaged as TestCorrupt damages it.
func TestWriteCorpus(t *testing.T) {
	write := fuzzcorpus.Regenerate(t, "FuzzRead")
	m, _ := newImage()
	write("image", []byte(m))
	loop, _ := newImage()
	le(loop, oRactor+304, imageBase+oRactor+304)
	write("thread-loop", []byte(loop))
	mis, _ := newImage()
	le(mis, oEC+layout31.ecCFP, imageBase+oCFP+8)
	write("cfp-misaligned", []byte(mis))
}
