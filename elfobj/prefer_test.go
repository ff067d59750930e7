package elfobj

import "testing"

// TestPreferred checks each step of perf's choice among symbols at one
// address, and that a tie keeps table order.
func TestPreferred(t *testing.T) {
	const (
		local  = 0
		weak   = 1
		global = 2
	)
	type sym struct {
		name string
		size uint64
		bind uint8
	}
	for _, c := range []struct {
		why  string
		syms []sym // in table order
		want string
	}{
		{"sized beats unsized, whatever the binding", []sym{{"g", 0, global}, {"l", 8, local}}, "l"},
		{"non-weak beats weak", []sym{{"pause", 8, weak}, {"__libc_pause", 8, local}}, "__libc_pause"},
		{"global beats local", []sym{{"__libc_start_main_impl", 8, local}, {"__libc_start_main@@GLIBC_2.34", 8, global}}, "__libc_start_main@@GLIBC_2.34"},
		{"fewer leading underscores", []sym{{"__GI_x", 8, local}, {"_y", 8, local}}, "_y"},
		{"longer name", []sym{{"__memcpy_avx_unaligned_erms", 8, local}, {"__memmove_avx_unaligned_erms", 8, local}}, "__memmove_avx_unaligned_erms"},
		{"a version counts in the length", []sym{{"memcpy", 8, global}, {"memcpy@GLIBC_2.2.5", 8, global}}, "memcpy@GLIBC_2.2.5"},
		{"a tie keeps table order", []sym{{"__libc_start_main@@GLIBC_2.34", 8, global}, {"__libc_start_main@GLIBC_2.2.5", 8, global}}, "__libc_start_main@@GLIBC_2.34"},
		{"the best of three is found wherever it is", []sym{{"a", 8, weak}, {"bb", 8, local}, {"c", 8, global}}, "c"},
	} {
		var strs []byte
		group := make([]rawSym, len(c.syms))
		for i, s := range c.syms {
			group[i] = rawSym{addr: 0x1000, size: s.size, bind: s.bind, nameOff: uint32(len(strs)), nameLen: uint32(len(s.name))}
			strs = append(strs, s.name...)
		}
		name := func(r *rawSym) []byte { return strs[r.nameOff : r.nameOff+r.nameLen] }
		bestFirst(group, name)
		if got := string(name(&group[0])); got != c.want {
			t.Errorf("%s: %v named %q, want %q", c.why, c.syms, got, c.want)
		}
		if len(group) == 3 && string(name(&group[1])) != "a" {
			t.Errorf("%s: the others' order changed: %q", c.why, name(&group[1]))
		}
	}
}

// TestSymbolByNameUnversioned: a frame's name (the version dropped) finds
// its versioned symbol, and an exact name still wins.
func TestSymbolByNameUnversioned(t *testing.T) {
	const strs = "lock@@GLIBC_2.2.5\x00lock\x00other@GLIBC_2.0\x00"
	f := &File{}
	f.symOnce.Do(func() {})
	f.syms = &symtab{names: strs, heads: []symEntry{
		{addr: 0x10, end: 0x20, off: 0, n: 17},
		{addr: 0x30, end: 0x40, off: 18, n: 4},
		{addr: 0x50, end: 0x60, off: 23, n: 15},
	}}
	for _, c := range []struct {
		name string
		addr uint64
		ok   bool
	}{{"lock", 0x30, true}, {"lock@@GLIBC_2.2.5", 0x10, true}, {"other", 0x50, true}, {"oth", 0, false}} {
		if a, ok := f.SymbolByName(c.name); a != c.addr || ok != c.ok {
			t.Errorf("SymbolByName(%q) = %#x, %v; want %#x, %v", c.name, a, ok, c.addr, c.ok)
		}
	}
}
