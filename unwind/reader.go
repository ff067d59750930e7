package unwind

import (
	"encoding/binary"

	"github.com/rewindstack/rewind/target"
)

// reader wraps target memory with a scratch buffer so word reads do not
// allocate.
type reader struct {
	mem target.Memory
	buf [16]byte
}

func (r *reader) u64(addr uint64) (uint64, error) {
	if err := r.mem.ReadMemory(addr, r.buf[:8]); err != nil {
		return 0, asMemoryError(addr, err)
	}
	return binary.LittleEndian.Uint64(r.buf[:8]), nil
}

// pair reads two consecutive words (a frame record: saved FP, return address).
func (r *reader) pair(addr uint64) (uint64, uint64, error) {
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
