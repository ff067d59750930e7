package ruby

import (
	"debug/elf"
	"encoding/binary"

	"github.com/rewindstack/rewind/runtimes"
)

// entryRange finds rb_vm_exec's link-time address range in an object
// whose symbols do not name it (Debian's 3.3 hides it): it is the one
// function both rb_iseq_eval and rb_iseq_eval_main call or jump to
// directly (each ends in vm_exec), its extent that of its .eh_frame FDE.
// ok is false when the object does not have that shape.
func entryRange(f *elf.File, syms map[string]elf.Symbol) (lo, hi uint64, ok bool) {
	text := f.Section(".text")
	if text == nil {
		return 0, 0, false
	}
	var common map[uint64]bool
	for _, name := range []string{"rb_iseq_eval", "rb_iseq_eval_main"} {
		s := syms[name]
		if s.Value == 0 {
			return 0, 0, false
		}
		got := map[uint64]bool{}
		code := runtimes.FileBytes(f, s.Value, min(max(s.Size, 16), 1024))
		for i := 0; i+5 <= len(code); i++ {
			if code[i] != 0xe8 && code[i] != 0xe9 {
				continue
			}
			t := uint64(int64(s.Value) + int64(i) + 5 + int64(int32(binary.LittleEndian.Uint32(code[i+1:]))))
			if t >= text.Addr && t < text.Addr+text.Size && (common == nil || common[t]) {
				got[t] = true
			}
		}
		common = got
	}
	if len(common) != 1 {
		return 0, 0, false
	}
	var entry uint64
	for t := range common {
		entry = t
	}
	for _, fd := range runtimes.EhFrame(f) {
		if fd.Start == entry && fd.End > fd.Start {
			return fd.Start, fd.End, true
		}
	}
	return 0, 0, false
}
