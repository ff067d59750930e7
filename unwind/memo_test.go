package unwind

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/target"
)

// memoStack is a frame-pointer chain in a snapshot that also holds the
// code the PCs point at (none of it a signal trampoline), so that a
// walk's every read is served by the snapshot.
type memoStack struct {
	code  []byte
	stack *fakeStack
}

const memoCode = 0x400000

func newMemoStack() *memoStack {
	return &memoStack{code: make([]byte, 0x4000), stack: newFakeStack(0x7000, 0x1000)}
}

func (s *memoStack) mem() *target.Snapshot {
	return &target.Snapshot{Regions: []target.Region{{Addr: memoCode, Data: s.code}, {Addr: s.stack.base, Data: s.stack.data}}}
}

// chain writes frame records at the given frame pointers, each holding the
// next one and a return address, the last one ending the chain.
func (s *memoStack) chain(fps []uint64, ras []uint64) {
	for i, fp := range fps {
		next := uint64(0)
		if i+1 < len(fps) {
			next = fps[i+1]
		}
		s.stack.put(fp, next)
		s.stack.put(fp+8, ras[i])
	}
}

// sameWalk checks that a walk with memo m gives what a fresh walk gives.
func sameWalk(t *testing.T, u *Unwinder, r regs.Regs, mem *target.Snapshot, m *Memo) Stack {
	t.Helper()
	want := u.Walk(r, mem, nil)
	var got Stack
	u.WalkMemo(&got, r, mem, nil, m)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("walk with the memo:\n%+v\nfresh walk:\n%+v", got, want)
	}
	return got
}

func TestMemoReusesOuterFrames(t *testing.T) {
	s := newMemoStack()
	fps := []uint64{0x7100, 0x7200, 0x7300, 0x7400}
	s.chain(fps, []uint64{0x401000, 0x402000, 0x403000, 0x404000 - 16})
	u := NewFP()
	var m Memo
	r := amd64Regs(0x400100, 0x7080, 0x7100)
	st := sameWalk(t, u, r, s.mem(), &m)
	if len(st.Frames) != 5 || m.Reused != 0 {
		t.Fatalf("first walk: %d frames, %d reused", len(st.Frames), m.Reused)
	}
	// Another sample of the thread: the leaf moved, a scratch register
	// changed; its callers are where they were.
	r = amd64Regs(0x400180, 0x7080, 0x7100)
	r.Set(regs.AMD64RAX, 42)
	sameWalk(t, u, r, s.mem(), &m)
	if m.Reused != 4 {
		t.Errorf("reused %d frames, want the 4 callers", m.Reused)
	}

	// A return address the reused steps read changed: it must be seen.
	m.Reused = 0
	s.stack.put(0x7308, 0x403333)
	st = sameWalk(t, u, r, s.mem(), &m)
	if st.Frames[3].PC != 0x403333 {
		t.Errorf("frame 3 = %#x after the stack changed", st.Frames[3].PC)
	}
	// So must a frame pointer the outer steps follow.
	s.stack.put(0x7300, 0x7500)
	s.stack.put(0x7500, 0)
	s.stack.put(0x7508, 0x401234)
	st = sameWalk(t, u, r, s.mem(), &m)
	if n := len(st.Frames); n != 5 || st.Frames[4].PC != 0x401234 {
		t.Errorf("after the chain changed: %#x", pcs(st))
	}
	// And the leaf's frame pointer.
	st = sameWalk(t, u, amd64Regs(0x400100, 0x7080, 0x7200), s.mem(), &m)
	if len(st.Frames) != 4 {
		t.Errorf("from frame record 0x7200: %#x", pcs(st))
	}
	// A stack copy that no longer holds what the reused steps read: the
	// walk ends where the copy does, as a fresh one would.
	short := s.mem()
	short.Regions[1].Data = short.Regions[1].Data[:0x210]
	sameWalk(t, u, r, short, &m)
	sameWalk(t, u, r, s.mem(), &m)
}

func TestMemoOfAnotherUnwinder(t *testing.T) {
	s := newMemoStack()
	s.chain([]uint64{0x7100, 0x7200}, []uint64{0x401000, 0x402000})
	var m Memo
	r := amd64Regs(0x400100, 0x7080, 0x7100)
	sameWalk(t, NewFP(), r, s.mem(), &m)
	// A walk with a depth limit reuses nothing the limit would cut.
	short := NewFP()
	short.MaxDepth = 2
	if st := sameWalk(t, short, r, s.mem(), &m); st.End != EndDepth {
		t.Errorf("end %v, want the depth limit", st.End)
	}
	if m.Reused != 0 {
		t.Errorf("reused %d frames of another unwinder's walk", m.Reused)
	}
	sameWalk(t, short, r, s.mem(), &m)
	sameWalk(t, NewFP(), r, s.mem(), &m)
}

// TestMemoRandomChains walks random frame-pointer chains, changing a
// random word, register or depth between walks of one memo: every walk
// must be the fresh walk's.
func TestMemoRandomChains(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := newMemoStack()
	u := NewFP()
	var m Memo
	reused := 0
	for i := range 3000 {
		if i%100 == 0 {
			// A new chain of 1-30 records, 0x40 bytes apart.
			n := 1 + rng.IntN(30)
			fps := make([]uint64, n)
			ras := make([]uint64, n)
			for j := range fps {
				fps[j] = 0x7100 + uint64(j)*0x40
				ras[j] = memoCode + uint64(rng.IntN(0x3ff0))
			}
			clear(s.stack.data)
			s.chain(fps, ras)
		}
		switch rng.IntN(4) {
		case 0: // a word of the chain
			s.stack.put(0x7100+uint64(rng.IntN(0x780/8))*8, 0x7100+uint64(rng.IntN(0x780/8))*8)
		case 1: // a return address
			s.stack.put(0x7108+uint64(rng.IntN(30))*0x40, memoCode+uint64(rng.IntN(0x3ff0)))
		}
		fp := uint64(0x7100)
		if rng.IntN(5) == 0 {
			fp += uint64(rng.IntN(4)) * 0x40
		}
		r := amd64Regs(memoCode+uint64(rng.IntN(0x100)), 0x7080, fp)
		r.Set(regs.AMD64RBX, rng.Uint64())
		before := m.Reused
		sameWalk(t, u, r, s.mem(), &m)
		reused += m.Reused - before
	}
	if reused == 0 {
		t.Error("no walk reused a frame")
	}
}

// TestMemoUnreadableEnd: a walk that ends where the stack copy does (a
// read past it fails) is reused while the next copy ends there too, and
// not once the copy holds those bytes.
func TestMemoUnreadableEnd(t *testing.T) {
	s := newMemoStack()
	// The outermost record points past the copy (0x8000).
	s.chain([]uint64{0x7100, 0x7200, 0x7300}, []uint64{0x401000, 0x402000, 0x403000})
	s.stack.put(0x7300, 0x8100)
	u := NewFP()
	var m Memo
	st := sameWalk(t, u, amd64Regs(0x400100, 0x7080, 0x7100), s.mem(), &m)
	if st.End != EndUnreadable {
		t.Fatalf("end %v, want unreadable-memory", st.End)
	}
	sameWalk(t, u, amd64Regs(0x400180, 0x7080, 0x7100), s.mem(), &m)
	if m.Reused != 3 {
		t.Errorf("reused %d frames, want the 3 callers", m.Reused)
	}
	// A longer copy holds the record the walk could not read.
	long := &memoStack{code: s.code, stack: newFakeStack(0x7000, 0x2000)}
	copy(long.stack.data, s.stack.data)
	long.stack.put(0x8100, 0)
	long.stack.put(0x8108, 0x404000)
	m.Reused = 0
	if st := sameWalk(t, u, amd64Regs(0x400100, 0x7080, 0x7100), long.mem(), &m); st.End != EndOutermost || len(st.Frames) != 5 {
		t.Errorf("with the longer copy: %#x, end %v", pcs(st), st.End)
	}
	if m.Reused != 0 {
		t.Errorf("reused %d frames of the walk that could not read on", m.Reused)
	}
}

// FuzzMemoWalk walks arbitrary stack bytes by frame pointers three times
// with one memo (the second time with a byte changed, the copy cut short
// and the leaf moved, the third time as the first): every walk must be
// the fresh walk, whatever the memo holds.
func FuzzMemoWalk(f *testing.F) {
	s := newMemoStack()
	fps := make([]uint64, 12)
	ras := make([]uint64, 12)
	for i := range fps {
		fps[i] = 0x7100 + uint64(i)*0x40
		ras[i] = memoCode + 0x100*uint64(i+1)
	}
	s.chain(fps, ras)
	f.Add(s.stack.data, uint16(0x100), uint16(0x100), uint16(0x3f0), uint16(0x1000), uint16(0x10))
	f.Add(s.stack.data, uint16(0x100), uint16(0x140), uint16(0x208), uint16(0x300), uint16(0x20))
	f.Fuzz(func(t *testing.T, stack []byte, fp1, fp2, flip, cut, pc uint16) {
		if len(stack) > 1<<16 {
			return
		}
		code := s.code
		mem := func(data []byte) *target.Snapshot {
			return &target.Snapshot{Regions: []target.Region{{Addr: memoCode, Data: code}, {Addr: 0x7000, Data: data}}}
		}
		stack2 := slices.Clone(stack)
		if len(stack2) > 0 {
			stack2[int(flip)%len(stack2)] ^= 0xa5
			stack2 = stack2[:int(cut)%(len(stack2)+1)]
		}
		r1 := amd64Regs(memoCode+uint64(pc)%0x4000, 0x7000, 0x7000+uint64(fp1))
		r2 := amd64Regs(memoCode+uint64(pc+1)%0x4000, 0x7000, 0x7000+uint64(fp2))
		u := NewFP()
		u.MaxDepth = 64
		var m Memo
		for _, w := range []struct {
			r   regs.Regs
			mem *target.Snapshot
		}{{r1, mem(stack)}, {r2, mem(stack2)}, {r1, mem(stack)}, {r2, mem(stack)}} {
			sameWalk(t, u, w.r, w.mem, &m)
		}
	})
}
