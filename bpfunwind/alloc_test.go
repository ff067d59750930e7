package bpfunwind

import (
	"fmt"
	"math/rand"
	"testing"
)

// checkAlloc checks the allocator's invariants against the ranges handed
// out: free ranges sorted, merged and inside the map; no row both free
// and handed out, or handed out twice; every row one or the other.
func checkAlloc(t *testing.T, a *rowAlloc, held map[uint32]uint32) {
	t.Helper()
	owner := make([]int8, a.total) // 0 nobody, 1 free, 2 held
	mark := func(first, n uint32, what int8) {
		if uint64(first)+uint64(n) > uint64(a.total) || n == 0 {
			t.Fatalf("range %d+%d outside the map of %d", first, n, a.total)
		}
		for i := first; i < first+n; i++ {
			if owner[i] != 0 {
				t.Fatalf("row %d is in two ranges", i)
			}
			owner[i] = what
		}
	}
	var free uint32
	for i, r := range a.free {
		if i > 0 && a.free[i-1].first+a.free[i-1].n >= r.first {
			t.Fatalf("free ranges %v and %v not sorted and merged", a.free[i-1], r)
		}
		mark(r.first, r.n, 1)
		free += r.n
	}
	var inUse uint32
	for first, n := range held {
		mark(first, n, 2)
		inUse += n
	}
	for i, o := range owner {
		if o == 0 {
			t.Fatalf("row %d is neither free nor held", i)
		}
	}
	if inUse != a.inUse || inUse+free != a.total {
		t.Fatalf("inUse %d (counted %d), free %d, total %d", a.inUse, inUse, free, a.total)
	}
}

func TestRowAllocRandom(t *testing.T) {
	const total = 1000
	a := newRowAlloc(total)
	held := map[uint32]uint32{}
	rng := rand.New(rand.NewSource(1))
	for step := 0; step < 20000; step++ {
		if len(held) > 0 && rng.Intn(2) == 0 {
			for first, n := range held { // any one
				a.release(first, n)
				delete(held, first)
				break
			}
		} else {
			n := uint32(1 + rng.Intn(120))
			largest := a.largest()
			first, ok := a.alloc(n)
			if ok != (n <= largest) {
				t.Fatalf("alloc(%d) = %v with the largest free range %d", n, ok, largest)
			}
			if ok {
				held[first] = n
			}
		}
		checkAlloc(t, a, held)
	}
	for first, n := range held {
		a.release(first, n)
	}
	if len(a.free) != 1 || a.free[0] != (rowRange{0, total}) {
		t.Fatalf("all released: free %v, want one range of %d", a.free, total)
	}
}

// fakeFiles stands for the BPF files map: each file's stamp, and the
// counts cleared.
type fakeFiles struct {
	stamps  map[uint32]uint64
	cleared []uint32
}

func newFakePool(total uint32) (*rowPool, *fakeFiles) {
	f := &fakeFiles{stamps: map[uint32]uint64{}}
	p := newRowPool(total, func(i uint32) (uint64, bool) { return f.stamps[i], true },
		func(i uint32) error { f.cleared = append(f.cleared, i); return nil })
	return p, f
}

// load places file idx's n rows as loadRows does, stamped at stamp.
func (f *fakeFiles) load(t *testing.T, p *rowPool, idx, n uint32, stamp uint64) {
	t.Helper()
	p.state(idx, nil)
	if _, err := p.place(idx, n); err != nil {
		t.Fatalf("file %d (%d rows): %v", idx, n, err)
	}
	p.written(idx, true)
	f.stamps[idx] = stamp
	checkPool(t, p)
}

// checkPool checks the allocator's invariants with the files' ranges.
func checkPool(t *testing.T, p *rowPool) {
	t.Helper()
	held := map[uint32]uint32{}
	for _, st := range p.files {
		if st.n > 0 {
			if _, dup := held[st.first]; dup {
				t.Fatalf("two files start at row %d", st.first)
			}
			held[st.first] = st.n
		}
	}
	checkAlloc(t, p.alloc, held)
}

func TestRowPoolReclaims(t *testing.T) {
	p, f := newFakePool(100)
	// Files 1 and 2 are mapped by processes 10 and 20; file 3 by both.
	f.load(t, p, 1, 40, 5)
	f.load(t, p, 2, 40, 1)
	f.load(t, p, 3, 20, 9)
	p.setUsers(10, []uint32{1, 3})
	p.setUsers(20, []uint32{2, 3})
	// Process 10 exits: file 1, mapped by nobody now, goes first,
	// though file 2 was used less recently.
	p.setUsers(10, nil)
	f.load(t, p, 4, 30, 10)
	if len(f.cleared) != 1 || f.cleared[0] != 1 || !p.files[1].evicted || p.files[1].n != 0 {
		t.Fatalf("after process 10 exited, evicted %v, want file 1", f.cleared)
	}
	p.setUsers(30, []uint32{4})
	// All mapped: the least recently used goes (file 2, stamped 1),
	// not file 3 (shared, stamped 9).
	f.load(t, p, 5, 40, 11)
	if len(f.cleared) != 2 || f.cleared[1] != 2 {
		t.Fatalf("with every file mapped, evicted %v, want file 2 next", f.cleared)
	}
	// An evicted file is loaded again when met: into the rows freed.
	if !p.reload(1) || p.reload(1) || p.reload(3) {
		t.Fatal("reload: want true once for evicted file 1, false for loaded file 3")
	}
	p.setUsers(40, []uint32{1})
	p.setUsers(20, nil)
	// Files 3 (its processes exited) and 5 (never mapped) make room,
	// before file 4, which process 30 maps.
	f.load(t, p, 1, 40, 12)
	if p.files[1].n != 40 || fmt.Sprint(f.cleared) != "[1 2 3 5]" {
		t.Fatalf("file 1 reloaded with %d rows after evicting %v, want 40 after [1 2 3 5]", p.files[1].n, f.cleared)
	}
	// A file being written is never evicted; a file that would not fit
	// beside it fails without evicting the rest.
	p.files[1].writing = true
	was := p.evictions
	if _, err := p.place(6, 70); err == nil || p.evictions != was {
		t.Fatalf("70 rows beside file 1's 40 being written: %v after %d evictions, want an error after none", err, p.evictions-was)
	}
	checkPool(t, p)
}

// TestRowPoolReloadGuard: a file loaded again does not evict a mapped
// file used within reloadGuard (two running programs would take the rows
// from each other at every ask), but does once it is idle or unmapped; a
// file met for the first time evicts by recency alone.
func TestRowPoolReloadGuard(t *testing.T) {
	p, f := newFakePool(100)
	clock := uint64(1 << 20)
	p.now = func() uint64 { return clock }
	f.load(t, p, 1, 60, clock)
	p.setUsers(10, []uint32{1})
	f.load(t, p, 2, 60, clock) // first met: evicts file 1, just used
	p.setUsers(20, []uint32{2})
	if len(f.cleared) != 1 || f.cleared[0] != 1 {
		t.Fatalf("a new file evicted %v, want file 1", f.cleared)
	}
	if !p.reload(1) {
		t.Fatal("file 1 not to be reloaded")
	}
	clock += reloadGuard / 2
	if _, err := p.place(1, 60); err != errNoRoomYet || len(f.cleared) != 1 {
		t.Fatalf("reloading file 1 beside file 2 used %d ago: %v, evicted %v; want errNoRoomYet, none", reloadGuard/2, err, f.cleared)
	}
	if !p.reload(1) {
		t.Fatal("file 1, not placed, not to be tried again")
	}
	clock += reloadGuard
	f.load(t, p, 1, 60, clock) // file 2 idle now
	if len(f.cleared) != 2 || f.cleared[1] != 2 {
		t.Fatalf("reloading file 1 beside idle file 2 evicted %v, want file 2", f.cleared)
	}
}

func TestRowPoolRandom(t *testing.T) {
	p, f := newFakePool(500)
	rng := rand.New(rand.NewSource(2))
	for step := uint64(1); step < 3000; step++ {
		idx := uint32(rng.Intn(30))
		st := p.files[idx]
		switch {
		case st == nil || st.evicted:
			if st != nil && !p.reload(idx) {
				t.Fatalf("evicted file %d not reloaded", idx)
			}
			f.load(t, p, idx, uint32(1+rng.Intn(200)), step)
		case rng.Intn(3) == 0:
			p.setUsers(int(idx), nil) // its process exits
		default:
			f.stamps[idx] = step // a walk used it
			p.setUsers(int(idx), []uint32{idx})
		}
	}
	if p.evictions == 0 {
		t.Fatal("no eviction in 3000 steps")
	}
}
