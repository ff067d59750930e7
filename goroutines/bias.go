package goroutines

import (
	"debug/elf"
	"io"
)

// linkedBias returns the load bias of an executable whose file offset 0 is
// mapped at start: start minus the page of its first loadable segment.
func linkedBias(r io.ReaderAt, start uint64) uint64 {
	ef, err := elf.NewFile(r)
	if err != nil {
		return 0
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && p.Off == 0 {
			return start - p.Vaddr&^0xfff
		}
	}
	return 0
}
