package unwind

import (
	"encoding/binary"
	"github.com/rewindstack/rewind/target"
	"slices"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/regs"
)

// fakeStack builds a stack image at base for tests: words written at
// addresses, read back through Snapshot.
type fakeStack struct {
	base uint64
	data []byte
}

func newFakeStack(base uint64, size int) *fakeStack {
	return &fakeStack{base: base, data: make([]byte, size)}
}

func (s *fakeStack) put(addr, v uint64) {
	binary.LittleEndian.PutUint64(s.data[addr-s.base:], v)
}

func (s *fakeStack) mem() *target.Snapshot {
	return &target.Snapshot{Regions: []target.Region{{Addr: s.base, Data: s.data}}}
}

func amd64Regs(pc, sp, fp uint64) regs.Regs {
	r := regs.New(regs.AMD64)
	r.Set(regs.AMD64RIP, pc)
	r.Set(regs.AMD64RSP, sp)
	r.Set(regs.AMD64RBP, fp)
	return r
}

func pcs(st Stack) []uint64 {
	var out []uint64
	for _, f := range st.Frames {
		out = append(out, f.PC)
	}
	return out
}

func TestFramePointerChain(t *testing.T) {
	s := newFakeStack(0x7000, 0x1000)
	// Three frame records: 0x7100 -> 0x7200 -> 0x7300 -> 0 (outermost).
	s.put(0x7100, 0x7200)
	s.put(0x7108, 0x401111)
	s.put(0x7200, 0x7300)
	s.put(0x7208, 0x402222)
	s.put(0x7300, 0)
	s.put(0x7308, 0x403333)
	st := NewFP().Walk(amd64Regs(0x400000, 0x7080, 0x7100), s.mem(), nil)
	want := []uint64{0x400000, 0x401111, 0x402222, 0x403333}
	if got := pcs(st); !slices.Equal(got, want) {
		t.Fatalf("pcs = %#x, want %#x", got, want)
	}
	if st.End != EndOutermost {
		t.Errorf("end = %v (%s), want outermost", st.End, st.Detail)
	}
	for i, f := range st.Frames {
		wantM := MethodFP
		if i == 0 {
			wantM = MethodContext
		}
		if f.Method != wantM || f.Exact != (i == 0) {
			t.Errorf("frame %d: method %v exact %v", i, f.Method, f.Exact)
		}
	}
	if st.Frames[1].LookupPC() != 0x401110 || st.Frames[0].LookupPC() != 0x400000 {
		t.Errorf("lookup PCs: %#x %#x", st.Frames[0].LookupPC(), st.Frames[1].LookupPC())
	}
}

func TestFramePointerEnds(t *testing.T) {
	s := newFakeStack(0x7000, 0x1000)
	s.put(0x7100, 0x7100) // points at itself: no progress
	s.put(0x7108, 0x401111)
	s.put(0x7200, 0x6000) // below the stack pointer
	s.put(0x7208, 0x402222)
	s.put(0x7300, 0x7ff8) // record runs past the copy
	s.put(0x7308, 0x403333)
	cases := []struct {
		name   string
		fp     uint64
		end    EndReason
		frames int
	}{
		{"loop", 0x7100, EndBadFP, 2}, // the record points at itself: below the new SP
		{"below-sp", 0x7200, EndBadFP, 2},
		{"unreadable", 0x7300, EndUnreadable, 2},
		{"misaligned", 0x7103, EndBadFP, 1},
		{"unreadable-first", 0x9000, EndUnreadable, 1},
	}
	for _, c := range cases {
		st := NewFP().Walk(amd64Regs(0x400000, 0x7080, c.fp), s.mem(), nil)
		if st.End != c.end || len(st.Frames) != c.frames {
			t.Errorf("%s: end %v (%s), %d frames; want %v, %d", c.name, st.End, st.Detail, len(st.Frames), c.end, c.frames)
		}
	}
}

// TestFramePointerOutsideCode: where the address space is known, a
// frame record whose return address is not in executable memory (a frame
// pointer used for data) ends the walk instead of adding a frame no
// mapping holds.
func TestFramePointerOutsideCode(t *testing.T) {
	s := newFakeStack(0x7000, 0x1000)
	s.put(0x7100, 0x7200)
	s.put(0x7108, 0x401111)
	s.put(0x7200, 0x7300)
	s.put(0x7208, 0x7f3226fa7ad7) // anonymous data, as a garbage rbp finds
	s.put(0x7300, 0)
	s.put(0x7308, 0x403333)
	space := target.NewAddressSpace([]target.Mapping{
		{Start: 0x400000, End: 0x500000, Path: "[anon:code]", Perms: "r-xp"},
		{Start: 0x7f3226f00000, End: 0x7f3227000000, Perms: "rw-p"},
	}, nil)
	st := NewFP().Walk(amd64Regs(0x400000, 0x7080, 0x7100), s.mem(), space)
	if got, want := pcs(st), []uint64{0x400000, 0x401111}; !slices.Equal(got, want) || st.End != EndBadFP {
		t.Errorf("pcs %#x, end %v (%s); want %#x, bad-frame-pointer", got, st.End, st.Detail, want)
	}
	// Without mappings the same chain is taken as it is.
	if st := NewFP().Walk(amd64Regs(0x400000, 0x7080, 0x7100), s.mem(), nil); len(st.Frames) != 4 {
		t.Errorf("no address space: %d frames, want 4", len(st.Frames))
	}
}

func TestDepthLimit(t *testing.T) {
	s := newFakeStack(0x7000, 0x1000)
	for a := uint64(0x7000); a < 0x7ff0; a += 16 {
		s.put(a, a+16)
		s.put(a+8, 0x400000+a)
	}
	u := NewFP()
	u.MaxDepth = 10
	st := u.Walk(amd64Regs(0x400000, 0x7000, 0x7000), s.mem(), nil)
	if st.End != EndDepth || len(st.Frames) != 10 {
		t.Fatalf("end %v with %d frames, want depth-limit with 10", st.End, len(st.Frames))
	}
}

func TestSignalFrameByCode(t *testing.T) {
	// A handler frame whose return address is a sigreturn trampoline; the
	// trampoline frame's stack pointer points at a ucontext_t.
	// The frame-pointer step gives the trampoline frame SP = fp+16, which
	// is where the kernel left the ucontext_t.
	const tramp = 0x7e00 // "code" lives in the same region for the test
	s2 := newFakeStack(0x7000, 0x1000)
	copy(s2.data[tramp-0x7000:], sigreturnAMD64)
	s2.put(0x7100, 0x7abc)
	s2.put(0x7108, tramp)
	uc := uint64(0x7110)
	greg := func(i int, v uint64) { s2.put(uc+regs.AMD64UContextGregs+uint64(i)*8, v) }
	greg(10, 0x7800)
	greg(15, 0x7700)
	greg(16, 0x405555)
	s2.put(0x7800, 0)
	s2.put(0x7808, 0x406666)
	st := NewFP().Walk(amd64Regs(0x400000, 0x7080, 0x7100), s2.mem(), nil)
	want := []uint64{0x400000, tramp, 0x405555, 0x406666}
	if got := pcs(st); !slices.Equal(got, want) {
		t.Fatalf("pcs = %#x, want %#x (end %v %s)", got, want, st.End, st.Detail)
	}
	if f := st.Frames[2]; f.Method != MethodSignal || !f.Exact || f.LookupPC() != 0x405555 {
		t.Errorf("interrupted frame: %+v", f)
	}
	if f := st.Frames[3]; f.Method != MethodFP || f.Exact {
		t.Errorf("frame after the interrupted one: %+v", f)
	}
}

func TestAddressSpaceFind(t *testing.T) {
	s := target.NewAddressSpace([]target.Mapping{
		{Start: 0x3000, End: 0x4000, Path: "[stack]"},
		{Start: 0x1000, End: 0x2000, Path: "a"},
		{Start: 0x2000, End: 0x2800, Path: "b"},
	}, nil)
	for _, c := range []struct {
		addr uint64
		want string
	}{{0xfff, ""}, {0x1000, "a"}, {0x1fff, "a"}, {0x2000, "b"}, {0x27ff, "b"}, {0x2800, ""}, {0x3fff, "[stack]"}, {0x4000, ""}} {
		got := ""
		if m := s.Find(c.addr); m != nil {
			got = m.Path
		}
		if got != c.want {
			t.Errorf("Find(%#x) = %q, want %q", c.addr, got, c.want)
		}
	}
	var none *target.AddressSpace
	if none.Find(1) != nil {
		t.Error("nil space found a mapping")
	}
}

func TestSnapshotBounds(t *testing.T) {
	m := &target.Snapshot{Regions: []target.Region{{Addr: 0x1000, Data: make([]byte, 16)}}}
	var b [8]byte
	if err := m.ReadMemory(0x1008, b[:]); err != nil {
		t.Fatal(err)
	}
	for _, a := range []uint64{0x1009, 0xff8, 0xffffffffffffffff} {
		err := m.ReadMemory(a, b[:])
		if err == nil || !strings.Contains(err.Error(), "cannot read memory") {
			t.Errorf("read at %#x: %v", a, err)
		}
	}
}
