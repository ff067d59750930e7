package cpython

import (
	"testing"
)

// Where synthBig puts its forged location table (away from synth312's
// objects).
const bigTable = 0x1000_0000

// synthBig is synth312 with n frames (a straight chain) of its one code
// object, whose co_linetable claims claim bytes: the first written ones
// are "no location" entries of 8 code units each, and the code claims
// units code units. Frame i runs code unit at(i).
func synthBig(n, claim, written int, units uint64, at func(i int) uint64) fakeMem {
	l := &layout312
	m := synth312(n, func(i int) uint64 {
		if i == n-1 {
			return 0
		}
		return uint64(0x40000 + (i+1)*0x100)
	})
	const codeAddr = 0x8000
	m.u64(codeAddr+l.codeLinetable, bigTable)
	m.u64(codeAddr+l.bytesSize, units) // PyVarObject.ob_size: code units
	m.u64(bigTable+l.bytesSize, uint64(claim))
	lt := make([]byte, written)
	for i := range lt {
		lt[i] = 0x80 | 15<<3 | 7
	}
	m.put(bigTable+l.bytesData, lt)
	for i := range n {
		m.u64(uint64(0x40000+i*0x100)+l.frameInstr, codeAddr+l.codeAdaptive+2*at(i))
	}
	return m
}

// BenchmarkSharedTable: 16,384 frames of one code object whose
// co_linetable claims (and holds) 1 MiB, each frame near the table's end,
// so that decoding the whole table for each frame shows.
//
//	go test ./cpython -run '^$' -bench SharedTable -benchtime 3x
func BenchmarkSharedTable(b *testing.B) {
	const n, mib = 1 << 14, 1 << 20
	m := synthBig(n, mib, mib, 8*mib, func(i int) uint64 { return 8*mib - 1 - uint64(i) })
	rt := &Runtime{Version: "3.12", Addr: 0x1000, l: layout312}
	for range b.N {
		s, err := rt.Read(m)
		if err != nil || len(s.Threads) != 1 || len(s.Threads[0].Frames) != n {
			b.Fatalf("%v %+v", err, s)
		}
	}
}
