package target

import (
	"fmt"
)

// Memory reads the target's memory: a stack copy, a core file, a live
// process, or the current process. ReadMemory fills p completely or returns
// an error.
type Memory interface {
	ReadMemory(addr uint64, p []byte) error
}

// MemoryError reports an unreadable address.
type MemoryError struct {
	Addr uint64
	Err  error
}

func (e *MemoryError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("cannot read memory at %#x", e.Addr)
	}
	return fmt.Sprintf("cannot read memory at %#x: %v", e.Addr, e.Err)
}

func (e *MemoryError) Unwrap() error { return e.Err }

// Region is a copy of target memory starting at Addr (for example a
// thread's stack, copied from its stack pointer upward).
type Region struct {
	Addr uint64
	Data []byte
}

// Contains reports whether [addr, addr+n) lies inside the region.
func (r *Region) Contains(addr uint64, n int) bool {
	return addr >= r.Addr && addr-r.Addr <= uint64(len(r.Data)) && uint64(len(r.Data))-(addr-r.Addr) >= uint64(n)
}

// Snapshot is memory made of copied regions, falling back to Next (which may
// be nil) for addresses outside them. Stack copies are small and few per
// thread, so a linear scan beats anything cleverer.
type Snapshot struct {
	Regions []Region
	Next    Memory
}

// ReadMemory implements Memory.
func (s *Snapshot) ReadMemory(addr uint64, p []byte) error {
	for i := range s.Regions {
		r := &s.Regions[i]
		if r.Contains(addr, len(p)) {
			copy(p, r.Data[addr-r.Addr:])
			return nil
		}
	}
	if s.Next != nil {
		return s.Next.ReadMemory(addr, p)
	}
	return &MemoryError{Addr: addr}
}
