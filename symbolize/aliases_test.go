package symbolize

import (
	"debug/elf"
	"strings"
	"testing"
)

// TestLibcAliasNames checks the naming rule on the C library's real alias
// sets (several names at one address), whichever variants this CPU's ifunc
// resolvers pick: every address is looked up from the debug file's own
// symbol table, so a memmove variant this machine never runs is checked as
// much as the one it does. The expected names are perf's (choose_best_symbol
// in tools/perf/util/symbol.c): sized, non-weak, global, fewer leading
// underscores, longer name; TestNoCallGraph in package profiles holds the
// rule against perf script itself for the variants the CPU can select.
func TestLibcAliasNames(t *testing.T) {
	lib, debug := libcPath(t)
	space, bias := loadSpace(t, lib)
	ef, err := elf.Open(debug)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	syms, err := ef.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	at := map[uint64][]string{} // function address -> every name there
	local := map[uint64]bool{}  // every name there is local
	byName := map[string]uint64{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC && elf.ST_TYPE(s.Info) != elf.STT_GNU_IFUNC || s.Value == 0 {
			continue
		}
		if _, seen := local[s.Value]; !seen {
			local[s.Value] = true
		}
		local[s.Value] = local[s.Value] && elf.ST_BIND(s.Info) == elf.STB_LOCAL
		at[s.Value] = append(at[s.Value], s.Name)
		byName[s.Name] = s.Value
	}
	sym := &Symbolizer{}
	name := func(vaddr uint64) Location {
		t.Helper()
		m := space.Find(vaddr + bias)
		if m == nil {
			t.Fatalf("%#x is in no mapping of %s", vaddr, lib)
		}
		locs := sym.Frame(m, vaddr+bias, true)
		return locs[len(locs)-1]
	}

	// memmove and memcpy variants: one function with two local, sized
	// names of equal underscores; perf keeps the longer, __memmove_*
	// (unless a global name is there too: see memcpy@GLIBC_2.2.5 below).
	pairs := 0
	for addr, names := range at {
		if !local[addr] {
			continue
		}
		var memmove string
		for _, n := range names {
			if strings.HasPrefix(n, "__memmove_") {
				memmove = n
			}
		}
		hasMemcpy := false
		for _, n := range names {
			if memmove != "" && n == "__memcpy_"+strings.TrimPrefix(memmove, "__memmove_") {
				hasMemcpy = true
			}
		}
		if !hasMemcpy {
			continue
		}
		pairs++
		if got := name(addr); got.Function != memmove || got.Offset != 0 {
			t.Errorf("%#x %v: named %s+%#x, want %s (perf's name)", addr, names, got.Function, got.Offset, memmove)
		}
	}
	t.Logf("%d memmove/memcpy variant pairs checked", pairs)
	if pairs < 4 {
		t.Errorf("only %d __memmove_X/__memcpy_X alias pairs in %s", pairs, debug)
	}

	for _, c := range []struct {
		any, want, symbol string
	}{
		// Two global versions of one name tie on everything but table
		// order; locals (__libc_start_main_impl, the DWARF name, and
		// __libc_start_main_alias_N) lose to a global.
		{"__libc_start_main_impl", "__libc_start_main", "__libc_start_main@@GLIBC_2.34"},
		// A weak symbol loses to a non-weak one, even a local.
		{"pause", "__libc_pause", ""},
		{"__libc_pause", "__libc_pause", ""},
		// The old memcpy (memmove's semantics, version GLIBC_2.2.5) is
		// global: it beats __memmove_sse2_unaligned and
		// __memcpy_sse2_unaligned, both local.
		{"__memmove_sse2_unaligned", "memcpy", "memcpy@GLIBC_2.2.5"},
	} {
		addr, ok := byName[c.any]
		if !ok {
			t.Errorf("%s has no %s", debug, c.any)
			continue
		}
		got := name(addr)
		if got.Function != c.want || got.Mangled != c.symbol {
			t.Errorf("%s (%#x, names %v): named %q (symbol %q), want %q (symbol %q)",
				c.any, addr, at[addr], got.Function, got.Mangled, c.want, c.symbol)
		}
	}
}
