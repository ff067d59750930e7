package goruntime

import "debug/elf"

// Function returns the extent [entry, end) of the Go function named name
// (as the pcln table spells it, e.g. "runtime.forEachG") in the Go
// executable ef, by its pcln table alone: it works for binaries built with
// -ldflags='-s -w', which have no symbol table. It scans every function
// once per call, so callers look up a few names only.
func Function(ef *elf.File, name string) (entry, end uint64, ok bool) {
	t, err := openGoTable(ef)
	if err != nil {
		return 0, 0, false
	}
	for i := 0; i < t.nfunc; i++ {
		e, ok := t.u32(t.functab, i*8)
		if !ok {
			return 0, 0, false
		}
		f, ok := t.find(t.text + uint64(e))
		if ok && t.funcName(f.nameOff) == name {
			return f.entry, f.end, true
		}
	}
	return 0, 0, false
}

// wrapperID returns the value of abi.FuncIDWrapper in this binary. The
// enumeration grows between Go versions, but FuncIDWrapper always follows
// FuncID_systemstack_switch (Go 1.21 and later), whose function every
// binary has: its funcID plus one.
func (t *goTable) wrapperID() int {
	t.wrapOnce.Do(func() {
		t.wrapID = -1
		for i := 0; i < t.nfunc; i++ {
			e, ok := t.u32(t.functab, i*8)
			if !ok {
				return
			}
			f, ok := t.find(t.text + uint64(e))
			if ok && t.funcName(f.nameOff) == "runtime.systemstack_switch" {
				if id := int(f.rec[goFuncIDOffset]); id != 0 {
					t.wrapID = id + 1
				}
				return
			}
		}
	})
	return t.wrapID
}
