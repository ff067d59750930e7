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
	// read the snapshot served, and miss records one it did not (its
	// result may differ in another sample's memory).
	track bool
	miss  bool
	log   []span
}

// span is n bytes of memory at addr.
type span struct {
	addr uint64
	n    uint32
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
		r.log = append(r.log, span{addr, uint32(n)})
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
	r.miss = r.miss || r.track
	return r.mem.ReadMemory(addr, p)
}

func (r *reader) u64(addr uint64) (uint64, error) {
	if b := r.inSnap(addr, 8); b != nil {
		return binary.LittleEndian.Uint64(b), nil
	}
	r.miss = r.miss || r.track
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
	r.miss = r.miss || r.track
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
