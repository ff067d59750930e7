package elfobj

import (
	"bytes"
	"debug/elf"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// symtab is the function symbol table: one entry per distinct address
// (heads, sorted by address, used by Symbolize) plus the other names seen at
// those addresses (aliases, used only by SymbolByName). All names are
// substrings of one string.
type symtab struct {
	names   string
	heads   []symEntry
	aliases []symEntry
	// maxEnd[i] is the largest end of heads[0..i]; nil when no head
	// overlaps the next one, which is the common case.
	maxEnd []uint64
}

// symEntry is one symbol: [addr, end) and its name as names[off:off+n].
type symEntry struct {
	addr, end uint64
	off, n    uint32
}

// rawSym is a candidate symbol during table construction.
type rawSym struct {
	addr, size uint64
	secEnd     uint64 // end of the symbol's section, caps unsized symbols
	tab        uint8  // index into the string tables
	bind       uint8  // 2 global, 1 weak, 0 local
	nameOff    uint32
	nameLen    uint32
}

// maxSymbols bounds the number of entries read from one symbol table. Huge
// real binaries have a few million; the file size bounds it anyway.
const maxSymbols = 1 << 26

// LoadSymbols builds the symbol table if it has not been built yet and
// reports any error doing so. Symbolize and SymbolByName call it themselves
// (and report failure as "not found"); call it directly to see why.
func (f *File) LoadSymbols() error {
	f.symOnce.Do(func() {
		f.syms, f.symErr = f.loadSymbols()
	})
	return f.symErr
}

// Symbolize returns the function containing file virtual address vaddr and
// vaddr's offset from the function's start.
//
// The table merges .symtab and .dynsym and keeps function symbols
// (STT_FUNC, STT_GNU_IFUNC, and STT_NOTYPE symbols with a nonzero value in an
// executable section), sorted by address. A sized symbol covers
// [value, value+size); an unsized one covers up to the next symbol's address,
// capped at the end of its section. Where several names share an address,
// the name is chosen by perf's rule (see preferred: sized, non-weak,
// global, fewer leading underscores, longer name, then .symtab before
// .dynsym in table order), so that it is the name perf report prints; the
// extent is the chosen symbol's. The name is returned as the table holds
// it, symbol version included ("__libc_start_main@@GLIBC_2.34"). The
// table is built on first use.
func (f *File) Symbolize(vaddr uint64) (name string, offset uint64, ok bool) {
	if f.LoadSymbols() != nil {
		return "", 0, false
	}
	t := f.syms
	i := sort.Search(len(t.heads), func(i int) bool { return t.heads[i].addr > vaddr }) - 1
	if i < 0 {
		return "", 0, false
	}
	for ; i >= 0; i-- {
		e := &t.heads[i]
		if vaddr < e.end {
			return t.names[e.off : e.off+e.n], vaddr - e.addr, true
		}
		if t.maxEnd == nil || i == 0 || t.maxEnd[i-1] <= vaddr {
			break
		}
	}
	return "", 0, false
}

// SymbolByName returns the address of a function symbol called name (as
// selected for Symbolize, including names that lost to a preferred alias).
// A name without a symbol version also finds a versioned symbol
// ("pthread_mutex_lock" finds "pthread_mutex_lock@@GLIBC_2.2.5", as frames
// name it) when no symbol has exactly that name. If several symbols have
// the name, the lowest address wins. It scans the whole table: it is meant
// for tests and one-off lookups.
func (f *File) SymbolByName(name string) (uint64, bool) {
	start, _, ok := f.SymbolExtent(name)
	return start, ok
}

// SymbolExtent is SymbolByName returning also the end of the symbol's
// extent, [start, end), as Symbolize attributes addresses to it.
func (f *File) SymbolExtent(name string) (start, end uint64, ok bool) {
	if f.LoadSymbols() != nil {
		return 0, 0, false
	}
	t := f.syms
	for _, versioned := range []bool{false, true} {
		for _, list := range [][]symEntry{t.heads, t.aliases} {
			for i := range list {
				e := &list[i]
				n := t.names[e.off : e.off+e.n]
				if versioned {
					if at := strings.IndexByte(n, '@'); at > 0 {
						n = n[:at]
					}
				}
				if n == name && (!ok || e.addr < start) {
					start, end, ok = e.addr, e.end, true
				}
			}
		}
		if ok {
			break
		}
	}
	return start, end, ok
}

// NumSymbols returns how many distinct function addresses the symbol table
// holds (0 if it cannot be built).
func (f *File) NumSymbols() int {
	if f.LoadSymbols() != nil {
		return 0
	}
	return len(f.syms.heads)
}

// buildSymbols reads .symtab and .dynsym into a symtab.
func (f *File) buildSymbols() (*symtab, error) {
	var tabs [][]byte
	var raw []rawSym
	for _, typ := range []elf.SectionType{elf.SHT_SYMTAB, elf.SHT_DYNSYM} {
		for i := range f.secs {
			s := &f.secs[i]
			if s.typ != typ {
				continue
			}
			var err error
			raw, tabs, err = f.readSymbols(s, raw, tabs)
			if err != nil {
				return nil, err
			}
			break // one table of each type
		}
	}
	raw = sortRaw(raw)
	name := func(r *rawSym) []byte {
		return tabs[r.tab][r.nameOff : r.nameOff+r.nameLen]
	}
	// Count the compact name string and the entries.
	t := &symtab{}
	var total uint64
	nHeads, nAliases := 0, 0
	for i := 0; i < len(raw); {
		j := i + 1
		for j < len(raw) && raw[j].addr == raw[i].addr {
			j++
		}
		bestFirst(raw[i:j], name)
		nHeads++
		total += uint64(raw[i].nameLen)
		for k := i + 1; k < j; k++ {
			if !dupName(raw[i:k], &raw[k], name) {
				nAliases++
				total += uint64(raw[k].nameLen)
			}
		}
		i = j
	}
	if total > math.MaxUint32 {
		return nil, f.errorf("symbol names total %d bytes, too many", total)
	}
	var sb strings.Builder
	sb.Grow(int(total))
	t.heads = make([]symEntry, 0, nHeads)
	t.aliases = make([]symEntry, 0, nAliases)
	add := func(r *rawSym) symEntry {
		e := symEntry{addr: r.addr, off: uint32(sb.Len()), n: r.nameLen}
		sb.Write(name(r))
		return e
	}
	for i := 0; i < len(raw); {
		j := i + 1
		for j < len(raw) && raw[j].addr == raw[i].addr {
			j++
		}
		head := add(&raw[i])
		switch {
		case raw[i].size != 0: // a sized symbol is preferred if there is one
			head.end = raw[i].addr + raw[i].size
			if head.end < raw[i].addr {
				head.end = math.MaxUint64
			}
		default:
			head.end = raw[i].secEnd
			if j < len(raw) && raw[j].addr < head.end {
				head.end = raw[j].addr
			}
		}
		t.heads = append(t.heads, head)
		for k := i + 1; k < j; k++ {
			if !dupName(raw[i:k], &raw[k], name) {
				a := add(&raw[k])
				a.end = a.addr
				t.aliases = append(t.aliases, a)
			}
		}
		i = j
	}
	t.names = sb.String()
	t.fillMaxEnd()
	return t, nil
}

// fillMaxEnd sets maxEnd when some head's extent overlaps the next head.
func (t *symtab) fillMaxEnd() {
	overlap := false
	for i := 0; i+1 < len(t.heads); i++ {
		if t.heads[i].end > t.heads[i+1].addr {
			overlap = true
			break
		}
	}
	if overlap {
		t.maxEnd = make([]uint64, len(t.heads))
		m := uint64(0)
		for i := range t.heads {
			m = max(m, t.heads[i].end)
			t.maxEnd[i] = m
		}
	}
}

// sortRaw sorts symbols by address, keeping table order (.symtab before
// .dynsym, then index) among symbols at one address; buildSymbols then
// picks each address's name with preferred. It is a stable radix sort of
// (address, index) pairs: several times faster than a comparison sort for
// the tens of thousands of symbols of a large binary.
func sortRaw(raw []rawSym) []rawSym {
	type pair struct {
		addr uint64
		i    uint32
	}
	n := len(raw)
	if n == 0 {
		return raw
	}
	a := make([]pair, n)
	b := make([]pair, n)
	for i := range raw {
		a[i] = pair{raw[i].addr, uint32(i)}
	}
	for shift := uint(0); shift < 64; shift += 8 {
		var count [257]int
		for _, p := range a {
			count[int(byte(p.addr>>shift))+1]++
		}
		if count[int(byte(a[0].addr>>shift))+1] == n {
			continue // every address has the same byte here
		}
		for k := 1; k < len(count); k++ {
			count[k] += count[k-1]
		}
		for _, p := range a {
			d := byte(p.addr >> shift)
			b[count[d]] = p
			count[d]++
		}
		a, b = b, a
	}
	sorted := make([]rawSym, n)
	for k, p := range a {
		sorted[k] = raw[p.i]
	}
	return sorted
}

// preferred reports whether symbol a names an address better than symbol
// b does, by the rule perf applies to symbols at one address
// (choose_best_symbol in tools/perf/util/symbol.c), so that frames are
// named as perf report and perf script name them: a symbol with a size
// over one without, a non-weak symbol over a weak one, a global over a
// local one, fewer leading underscores, then the longer name (which
// counts a symbol version: "memcpy@GLIBC_2.2.5" beats "memcpy"). When
// none of these decides, neither is preferred and the earlier in table
// order keeps the address.
func preferred(a, b *rawSym, name func(*rawSym) []byte) bool {
	if (a.size != 0) != (b.size != 0) {
		return a.size != 0
	}
	if (a.bind == 1) != (b.bind == 1) { // weak
		return b.bind == 1
	}
	if (a.bind == 2) != (b.bind == 2) { // global
		return a.bind == 2
	}
	na, nb := name(a), name(b)
	ua, ub := leadingUnderscores(na), leadingUnderscores(nb)
	if ua != ub {
		return ua < ub
	}
	return len(na) > len(nb)
}

// leadingUnderscores counts the underscores a name starts with.
func leadingUnderscores(b []byte) int {
	n := 0
	for n < len(b) && b[n] == '_' {
		n++
	}
	return n
}

// bestFirst moves the preferred symbol of group (symbols at one address,
// in table order) to its front, keeping the others' order.
func bestFirst(group []rawSym, name func(*rawSym) []byte) {
	best := 0
	for k := 1; k < len(group); k++ {
		if preferred(&group[k], &group[best], name) {
			best = k
		}
	}
	if best > 0 {
		b := group[best]
		copy(group[1:best+1], group[:best])
		group[0] = b
	}
}

// dupName reports whether r's name already occurs in prev.
func dupName(prev []rawSym, r *rawSym, name func(*rawSym) []byte) bool {
	n := name(r)
	for k := range prev {
		if bytes.Equal(name(&prev[k]), n) {
			return true
		}
	}
	return false
}

// readSymbols appends the function symbols of symbol table s to raw, and its
// string table to tabs.
func (f *File) readSymbols(s *secInfo, raw []rawSym, tabs [][]byte) ([]rawSym, [][]byte, error) {
	if len(tabs) > math.MaxUint8 {
		return raw, tabs, nil
	}
	tab := uint8(len(tabs))
	if n := s.size / 24; n <= maxSymbols {
		raw = slices.Grow(raw, int(n))
	}
	strs, err := f.eachFunction(s, func(r rawSym, _ []byte) error {
		if len(raw) >= maxSymbols {
			return fmt.Errorf("elfobj: %s: too many symbols", f.Path)
		}
		r.tab = tab
		raw = append(raw, r)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if strs != nil {
		tabs = append(tabs, strs)
	}
	return raw, tabs, nil
}

// eachFunction calls fn with every function symbol of symbol table s (as
// Symbolize keeps them; tab unset) and the table's strings, and returns
// the strings (nil for a compressed table, which is skipped).
func (f *File) eachFunction(s *secInfo, fn func(r rawSym, strs []byte) error) ([]byte, error) {
	if s.comp {
		return nil, nil
	}
	entsz := uint64(24)
	if f.Class == elf.ELFCLASS32 {
		entsz = 16
	}
	if s.entsz != 0 && s.entsz != entsz {
		return nil, f.formatf(s.name, 0, nil, "symbol entry size %d, want %d", s.entsz, entsz)
	}
	count := s.size / entsz
	if count > maxSymbols {
		return nil, f.formatf(s.name, 0, nil, "%d symbols, too many", count)
	}
	if s.link == 0 || int(s.link) >= len(f.secs) {
		return nil, f.formatf(s.name, 0, nil, "invalid string table link %d", s.link)
	}
	strSec := &f.secs[s.link]
	if strSec.typ != elf.SHT_STRTAB || strSec.comp {
		return nil, f.formatf(s.name, 0, nil, "linked section %d is not a string table", s.link)
	}
	if strSec.size > math.MaxUint32 {
		return nil, f.formatf(strSec.name, 0, nil, "string table too large")
	}
	data, err := f.readAt(s.offset, count*entsz)
	if err != nil {
		return nil, f.formatf(s.name, 0, err, "reading its contents")
	}
	strs, err := f.readAt(strSec.offset, strSec.size)
	if err != nil {
		return nil, f.formatf(strSec.name, 0, err, "reading its contents")
	}
	bo := f.ByteOrder
	// Entry 0 is the reserved null symbol.
	for i := uint64(1); i < count; i++ {
		e := data[i*entsz : (i+1)*entsz]
		var nameOff uint32
		var info uint8
		var shndx uint16
		var value, size uint64
		if entsz == 24 {
			nameOff = bo.Uint32(e[0:])
			info = e[4]
			shndx = bo.Uint16(e[6:])
			value = bo.Uint64(e[8:])
			size = bo.Uint64(e[16:])
		} else {
			nameOff = bo.Uint32(e[0:])
			value = uint64(bo.Uint32(e[4:]))
			size = uint64(bo.Uint32(e[8:]))
			info = e[12]
			shndx = bo.Uint16(e[14:])
		}
		typ := elf.SymType(info & 0xf)
		if shndx == uint16(elf.SHN_UNDEF) || shndx >= uint16(elf.SHN_LORESERVE) || int(shndx) >= len(f.secs) {
			continue
		}
		sec := &f.secs[shndx]
		switch typ {
		case elf.STT_FUNC, elf.STT_GNU_IFUNC:
		case elf.STT_NOTYPE:
			if value == 0 || sec.flags&elf.SHF_EXECINSTR == 0 {
				continue
			}
		default:
			continue
		}
		if uint64(nameOff) >= uint64(len(strs)) {
			continue
		}
		n := bytes.IndexByte(strs[nameOff:], 0)
		if n < 0 {
			n = len(strs) - int(nameOff)
		}
		if n == 0 || strs[nameOff] == '$' { // unnamed, or an ARM mapping symbol
			continue
		}
		if f.Type == elf.ET_REL {
			value += sec.addr // relocatable objects store section offsets
		}
		var bind uint8
		switch elf.SymBind(info >> 4) {
		case elf.STB_GLOBAL:
			bind = 2
		case elf.STB_WEAK:
			bind = 1
		}
		secEnd := sec.addr + sec.size
		if secEnd < sec.addr || value < sec.addr || value >= secEnd {
			secEnd = value + 1 // outside its section: cover one byte at most
		}
		if err := fn(rawSym{addr: value, size: size, secEnd: secEnd, bind: bind, nameOff: nameOff, nameLen: uint32(n)}, strs); err != nil {
			return nil, err
		}
	}
	return strs, nil
}

// Extent is the address range [Start, End) of a function.
type Extent struct{ Start, End uint64 }

// FunctionExtents returns, for each of names that is the name of a
// function symbol (with or without a symbol version: "clone" matches
// "clone@GLIBC_2.2.5"), the extent of the lowest-addressed one, as
// Symbolize attributes addresses (a sized symbol covers [value,
// value+size)). Unless the symbol table is cached (CacheSymbols) or one of
// the symbols found has no size, it does not build the table: one pass
// over .symtab and .dynsym comparing names, which for a few names in a
// large table (libc's debug file) costs a fraction of building it.
func (f *File) FunctionExtents(names []string) (map[string]Extent, error) {
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	out := map[string]Extent{}
	// match returns name without its version if it is wanted.
	match := func(name string) (string, bool) {
		if at := strings.IndexByte(name, '@'); at > 0 {
			name = name[:at]
		}
		return name, want[name]
	}
	add := func(name string, e Extent) {
		if old, ok := out[name]; !ok || e.Start < old.Start {
			out[name] = e
		}
	}
	if f.symbolCacheDir() == "" {
		unsized := false
		for _, typ := range []elf.SectionType{elf.SHT_SYMTAB, elf.SHT_DYNSYM} {
			for i := range f.secs {
				s := &f.secs[i]
				if s.typ != typ {
					continue
				}
				_, err := f.eachFunction(s, func(r rawSym, strs []byte) error {
					b := strs[r.nameOff : r.nameOff+r.nameLen]
					if at := bytes.IndexByte(b, '@'); at > 0 {
						b = b[:at]
					}
					if !want[string(b)] {
						return nil
					}
					if r.size == 0 {
						unsized = true
						return nil
					}
					end := r.addr + r.size
					if end < r.addr {
						end = math.MaxUint64
					}
					add(string(b), Extent{r.addr, end})
					return nil
				})
				if err != nil {
					return nil, err
				}
				break // one table of each type
			}
		}
		if !unsized {
			return out, nil
		}
		clear(out) // unsized symbols end where the table says
	}
	// The table: read from the cache (or built, and cached for the next
	// run, which then pays less than the scan), or needed for an unsized
	// symbol's end.
	if err := f.LoadSymbols(); err != nil {
		return nil, err
	}
	t := f.syms
	for i := range t.heads {
		e := &t.heads[i]
		if name, ok := match(t.names[e.off : e.off+e.n]); ok {
			add(name, Extent{e.addr, e.end})
		}
	}
	for i := range t.aliases { // an alias covers its head's extent
		e := &t.aliases[i]
		name, ok := match(t.names[e.off : e.off+e.n])
		if !ok {
			continue
		}
		h := sort.Search(len(t.heads), func(k int) bool { return t.heads[k].addr >= e.addr })
		if h < len(t.heads) && t.heads[h].addr == e.addr {
			add(name, Extent{e.addr, t.heads[h].end})
		}
	}
	return out, nil
}
