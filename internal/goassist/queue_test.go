package goassist

import (
	"encoding/binary"
	"testing"

	"github.com/rewindstack/rewind/target"
)

func rec(t uint64, n int) record {
	return record{time: t, sp: 0x1000, regions: []target.Region{{Addr: t, Data: make([]byte, n)}}}
}

// TestTakeNearest pairs samples with records as the pump reads them: a
// thread's samples out of time order (it moved between CPUs, whose ring
// buffers are read one after the other), records stamped just after their
// samples (Linux 6.10 and later) or just before, and samples without a
// record (on a goroutine's stack) that must not take a neighbour's.
func TestTakeNearest(t *testing.T) {
	q := queue{byTID: map[int][]record{}}
	for _, ts := range []uint64{1_000_000, 2_000_000, 3_000_000, 4_000_000} {
		q.add(7, rec(ts+20_000, 8)) // 20 µs after each sample
	}
	q.add(8, rec(2_000_000-5_000, 8)) // 5 µs before
	// The later samples first (one CPU's ring), then the earlier ones.
	for _, c := range []struct {
		tid  int
		at   uint64
		want uint64 // the record's time, 0: none
	}{
		{7, 3_000_000, 3_020_000},
		{7, 4_000_000, 4_020_000},
		{7, 1_000_000, 1_020_000},
		{7, 2_500_000, 0}, // no record near: on a goroutine's stack
		{7, 2_000_000, 2_020_000},
		{8, 2_000_000, 1_995_000},
		{8, 2_000_000, 0}, // taken already
		{9, 2_000_000, 0},
	} {
		got := q.take(c.tid, c.at, 0x1000)
		switch {
		case c.want == 0 && got != nil:
			t.Errorf("thread %d at %d: took the record of %d, want none", c.tid, c.at, got[0].Addr)
		case c.want != 0 && (got == nil || got[0].Addr != c.want):
			t.Errorf("thread %d at %d: got %v, want the record of %d", c.tid, c.at, got, c.want)
		}
	}
	// A sample with another SP does not take a record near it in time.
	q.add(9, rec(5_000_000, 8))
	if got := q.take(9, 5_000_000, 0x2000); got != nil {
		t.Errorf("a sample at SP 0x2000 took the record of SP 0x1000")
	}
	q.take(9, 5_000_000, 0x1000)
	if q.paired != 6 || len(q.byTID) != 0 || q.pending != 0 {
		t.Errorf("paired %d, %d threads and %d bytes left; want 6, none", q.paired, len(q.byTID), q.pending)
	}
	// Out of order within a thread: not this program's.
	q.add(7, rec(10, 8))
	q.add(7, rec(5, 8))
	if q.dropped != 1 || len(q.byTID[7]) != 1 {
		t.Errorf("an out-of-order record: %d dropped, %d kept", q.dropped, len(q.byTID[7]))
	}
}

// TestTrim drops records no sample took: those older than keepFor before
// the latest sample, then the older half while more than maxPending bytes
// are kept.
func TestTrim(t *testing.T) {
	q := queue{byTID: map[int][]record{}, keepFor: 1000, maxPending: 100}
	for i := uint64(1); i <= 10; i++ {
		q.add(int(i%2), rec(i*100, 10))
	}
	q.take(5, 1600, 0x1000) // a sample: the latest is 1600
	q.trim()
	// 100..500 are older than 1600-1000; 600..1000 are 50 bytes.
	if q.pending != 50 || q.dropped != 5 {
		t.Fatalf("after the age cut: %d bytes, %d dropped; want 50, 5", q.pending, q.dropped)
	}
	for i := uint64(11); i <= 20; i++ {
		q.add(int(i%2), rec(i*100, 10))
	}
	q.trim()
	if q.pending > 100 || q.pending == 0 {
		t.Fatalf("after the size cut: %d bytes kept, want 1..100", q.pending)
	}
	for _, rs := range q.byTID {
		for _, r := range rs {
			if r.time < 1100 {
				t.Errorf("record of %d kept, newer ones dropped", r.time)
			}
		}
	}
}

// rawRecord builds a record's bytes as the program sends them.
func rawRecord(tid, pid uint32, time, g, m, curg, sp uint64, glen int, stack []byte, flags uint16) []byte {
	b := make([]byte, stackAt+len(stack))
	le := binary.LittleEndian
	le.PutUint32(b[0:], tid)
	le.PutUint32(b[4:], pid)
	le.PutUint64(b[8:], time)
	le.PutUint64(b[16:], g)
	le.PutUint64(b[24:], m)
	le.PutUint64(b[32:], curg)
	le.PutUint64(b[40:], g)    // m.g0
	le.PutUint64(b[48:], curg) // m.curg
	le.PutUint64(b[56:], sp)
	le.PutUint32(b[64:], uint32(len(stack)))
	le.PutUint16(b[68:], uint16(glen))
	le.PutUint16(b[70:], flags)
	le.PutUint64(b[72:], 0x1000)
	for i := 0; i < min(glen, gBytes); i++ {
		b[hdrBytes+i] = 0xa0
		b[curgAt+i] = 0xc0
	}
	copy(b[stackAt:], stack)
	return b
}

// TestDecode lays a record's copies out at their addresses: g0's g, the
// m's g0 and curg words at their offsets, curg's g, the goroutine's stack.
func TestDecode(t *testing.T) {
	procs := map[int]*goproc{100: {GM: 48, MG0: 0, MCurG: 192}}
	stack := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	tid, r, ok := decode(rawRecord(101, 100, 5000, 0xc000001000, 0xc000200000, 0xc000003000, 0xc000800f00, 112, stack, recCurG), procs)
	if !ok || tid != 101 || r.time != 5000 {
		t.Fatalf("decode: ok %v, thread %d, time %d", ok, tid, r.time)
	}
	snap := &target.Snapshot{Regions: r.regions}
	word := func(addr uint64) uint64 {
		var b [8]byte
		if err := snap.ReadMemory(addr, b[:]); err != nil {
			t.Errorf("reading %#x: %v", addr, err)
		}
		return binary.LittleEndian.Uint64(b[:])
	}
	if v := word(0xc000200000); v != 0xc000001000 {
		t.Errorf("m.g0 = %#x", v)
	}
	if v := word(0xc000200000 + 192); v != 0xc000003000 {
		t.Errorf("m.curg = %#x", v)
	}
	if v := word(0xc000001000 + 104); v != 0xa0a0a0a0a0a0a0a0 {
		t.Errorf("g0's last word = %#x", v)
	}
	if v := word(0xc000003000); v != 0xc0c0c0c0c0c0c0c0 {
		t.Errorf("curg's first word = %#x", v)
	}
	if v := word(0xc000800f08); v != 0x100f0e0d0c0b0a09 {
		t.Errorf("stack word = %#x", v)
	}
	var b [8]byte
	if snap.ReadMemory(0xc000001000+112, b[:]) == nil {
		t.Errorf("read past g0's copy")
	}
	for name, raw := range map[string][]byte{
		"short":              make([]byte, stackAt-1),
		"unknown process":    rawRecord(101, 999, 1, 8, 8, 0, 0, 112, nil, 0),
		"g length 300":       rawRecord(101, 100, 1, 8, 8, 0, 0, 300, nil, 0),
		"stack past its end": rawRecord(101, 100, 1, 8, 8, 0, 0, 112, nil, 0)[:stackAt],
	} {
		if name == "stack past its end" {
			binary.LittleEndian.PutUint32(raw[64:], 100)
		}
		if _, _, ok := decode(raw, procs); ok {
			t.Errorf("%s: decoded", name)
		}
	}
}

// FuzzDecode: any bytes decode or are refused, without a panic, into
// regions within the record's own bytes.
func FuzzDecode(f *testing.F) {
	procs := map[int]*goproc{100: {GM: 48, MG0: 0, MCurG: 192}}
	f.Add(rawRecord(101, 100, 5000, 0xc000001000, 0xc000200000, 0xc000003000, 0xc000800f00, 112, []byte{1, 2, 3}, recCurG))
	f.Add(rawRecord(101, 100, 5000, 0xc000001000, 0xc000200000, 0, 0, 8, nil, 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, r, ok := decode(b, procs)
		if !ok {
			return
		}
		n := 0
		for _, reg := range r.regions {
			n += len(reg.Data)
		}
		if n > len(b) {
			t.Fatalf("%d bytes of regions from a %d-byte record", n, len(b))
		}
	})
}
