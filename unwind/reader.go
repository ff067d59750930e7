package unwind

import (
	"encoding/binary"

	"github.com/rewindstack/rewind/target"
)

// reader wraps target memory with a scratch buffer so word reads do not
// allocate.
type reader struct {
	mem target.Memory
	// snap is mem when it is a snapshot: its regions are read in place.
	// Through ReadMemory every word was an interface call and a generic
	// copy into buf (runtime.memmove), a third of the CPU time of walking
	// a perf.data file's samples.
	snap *target.Snapshot
	buf  [16]byte
	// With track set (a walk that fills a Memo), log receives every
	// read of the snapshot, and miss records a read that went past it
	// (to its Next, whose memory another sample does not share).
	track bool
	miss  bool
	log   []span
}

// span is a read of n bytes of memory at addr; missed: the snapshot had
// no region holding them all, so the read failed.
type span struct {
	addr   uint64
	n      uint32
	missed bool
}

// size is the number of bytes the read found.
func (s span) size() int {
	if s.missed {
		return 0
	}
	return int(s.n)
}

// missed notes a read of n bytes at addr that no region of the snapshot
// holds. With no Next behind the regions it fails in any snapshot that
// does not hold those bytes either, and is logged as such.
func (r *reader) missed(addr uint64, n int) {
	if !r.track {
		return
	}
	if r.snap != nil && r.snap.Next == nil {
		r.log = append(r.log, span{addr, uint32(n), true})
	} else {
		r.miss = true
	}
}

func newReader(mem target.Memory) reader {
	s, _ := mem.(*target.Snapshot)
	return reader{mem: mem, snap: s}
}

// inSnap returns the n bytes at addr when a region of the snapshot holds
// them all (nil otherwise: read through mem, which may fall back to the
// snapshot's Next).
func (r *reader) inSnap(addr uint64, n int) []byte {
	b := r.snapBytes(addr, n)
	if b != nil && r.track {
		r.log = append(r.log, span{addr, uint32(n), false})
	}
	return b
}

// snapBytes is inSnap without the log.
func (r *reader) snapBytes(addr uint64, n int) []byte {
	if r.snap == nil {
		return nil
	}
	for i := range r.snap.Regions {
		g := &r.snap.Regions[i]
		if addr >= g.Addr {
			if off := addr - g.Addr; off <= uint64(len(g.Data)) && uint64(len(g.Data))-off >= uint64(n) {
				return g.Data[off : off+uint64(n)]
			}
		}
	}
	return nil
}

// read fills p from addr: from the snapshot when it holds the bytes, else
// through mem.
func (r *reader) read(addr uint64, p []byte) error {
	if b := r.inSnap(addr, len(p)); b != nil {
		copy(p, b)
		return nil
	}
	r.missed(addr, len(p))
	return r.mem.ReadMemory(addr, p)
}

func (r *reader) u64(addr uint64) (uint64, error) {
	if b := r.inSnap(addr, 8); b != nil {
		return binary.LittleEndian.Uint64(b), nil
	}
	r.missed(addr, 8)
	if err := r.mem.ReadMemory(addr, r.buf[:8]); err != nil {
		return 0, asMemoryError(addr, err)
	}
	return binary.LittleEndian.Uint64(r.buf[:8]), nil
}

// pair reads two consecutive words (a frame record: saved FP, return address).
func (r *reader) pair(addr uint64) (uint64, uint64, error) {
	if b := r.inSnap(addr, 16); b != nil {
		return binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:]), nil
	}
	r.missed(addr, 16)
	if err := r.mem.ReadMemory(addr, r.buf[:16]); err != nil {
		return 0, 0, asMemoryError(addr, err)
	}
	return binary.LittleEndian.Uint64(r.buf[:8]), binary.LittleEndian.Uint64(r.buf[8:16]), nil
}

func asMemoryError(addr uint64, err error) error {
	if me, ok := err.(*target.MemoryError); ok {
		return me
	}
	return &target.MemoryError{Addr: addr, Err: err}
}
