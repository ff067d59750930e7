package elfobj

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSymbolCache: with CacheSymbols, the second File opened on libc
// reads its table from the cache file the first one wrote, and the table
// gives the same answers as a table built from the file: every function
// start, points inside functions, and FunctionExtents. A damaged cache
// file is rebuilt.
func TestSymbolCache(t *testing.T) {
	needFile(t, libcPath)
	dir := t.TempDir()
	CacheSymbols(dir)
	defer CacheSymbols("")

	built := mustOpen(t, libcPath)
	if built.symbolCacheDir() == "" {
		t.Skip("libc's symbol tables are smaller than what is cached")
	}
	if err := built.LoadSymbols(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "symbols", "*", "*"))
	if len(files) != 1 {
		t.Fatalf("cache files %v, want one", files)
	}
	onDisk, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if st, err := decodeSymtab(onDisk[:len(onDisk)-16]); err != nil || len(st.heads) != len(built.syms.heads) {
		t.Fatalf("the cache file does not decode to the table: %v", err)
	}
	cached := mustOpen(t, libcPath)
	if err := cached.LoadSymbols(); err != nil {
		t.Fatal(err)
	}
	if cached.syms == built.syms || len(cached.syms.heads) != len(built.syms.heads) || len(cached.syms.heads) == 0 {
		t.Fatalf("cached table: %d heads, built: %d", len(cached.syms.heads), len(built.syms.heads))
	}
	for _, e := range built.syms.heads {
		for _, a := range []uint64{e.addr, e.addr + (e.end-e.addr)/2, e.end} {
			n1, o1, ok1 := built.Symbolize(a)
			n2, o2, ok2 := cached.Symbolize(a)
			if n1 != n2 || o1 != o2 || ok1 != ok2 {
				t.Fatalf("Symbolize(%#x): built %q+%#x %v, cached %q+%#x %v", a, n1, o1, ok1, n2, o2, ok2)
			}
		}
	}
	names := []string{"clone", "__clone", "clone3", "malloc", "pthread_create"}
	CacheSymbols("")
	scanned, err := mustOpen(t, libcPath).FunctionExtents(names)
	CacheSymbols(dir)
	if err != nil {
		t.Fatal(err)
	}
	fromCache, err := cached.FunctionExtents(names)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if scanned[n] != fromCache[n] {
			t.Errorf("FunctionExtents %s: scanned %v, from the cached table %v", n, scanned[n], fromCache[n])
		}
	}

	// Damage the file: the next File builds its table again and rewrites it.
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	data[len(symCacheMagic)+40] ^= 0xff
	if err := os.WriteFile(files[0], data, 0o600); err != nil {
		t.Fatal(err)
	}
	again := mustOpen(t, libcPath)
	if err := again.LoadSymbols(); err != nil {
		t.Fatal(err)
	}
	if len(again.syms.heads) != len(built.syms.heads) {
		t.Errorf("after damage: %d heads, want %d", len(again.syms.heads), len(built.syms.heads))
	}
	if fixed, _ := os.ReadFile(files[0]); string(fixed) == string(data) {
		t.Errorf("damaged cache file not rewritten")
	}
}

// FuzzDecodeSymtab: a hostile cache file (past its checksum, which only
// the current user can make match) decodes or fails, and a table it
// decodes answers lookups without panicking.
func FuzzDecodeSymtab(f *testing.F) {
	t := &symtab{
		names:   "mainfoobar",
		heads:   []symEntry{{0x1000, 0x1010, 0, 4}, {0x1010, 0x1040, 4, 3}},
		aliases: []symEntry{{0x1010, 0x1010, 7, 3}},
	}
	f.Add(t.encode())
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := decodeSymtab(data)
		if err != nil {
			return
		}
		file := &File{syms: st}
		file.symOnce.Do(func() {})
		for _, a := range []uint64{0, 0x1000, 0x1008, 0x1010, 0x1040, ^uint64(0)} {
			file.Symbolize(a)
		}
		file.FunctionExtents([]string{"main", "bar"})
	})
}
