//go:build !linux

package live

import "github.com/rewindstack/rewind/target"

// ReadBatch is not available off Linux: every read is left empty.
func (r *Reader) ReadBatch(reads []Read) {
	for i := range reads {
		reads[i].N = 0
	}
}

// ReadMemory fails off Linux.
func (r *Reader) ReadMemory(addr uint64, p []byte) error {
	return &target.MemoryError{Addr: addr, Err: ErrUnsupported}
}
