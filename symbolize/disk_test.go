package symbolize

import (
	"debug/elf"
	"encoding/binary"
	"github.com/rewindstack/rewind/target"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// textPCs returns every step-th address of the object's executable
// sections, as runtime PCs of space.
func textPCs(t testing.TB, path string, bias uint64, step uint64) []uint64 {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	var pcs []uint64
	for _, s := range ef.Sections {
		if s.Flags&elf.SHF_EXECINSTR != 0 {
			for a := s.Addr; a < s.Addr+s.Size; a += step {
				pcs = append(pcs, a+bias)
			}
		}
	}
	return pcs
}

// resolveAll symbolizes pcs with a fresh Symbolizer over cache.
func resolveAll(space *target.AddressSpace, pcs []uint64, cache *Cache, dirs []string) [][]Location {
	sym := &Symbolizer{Inlines: true, Cache: cache, DebugDirs: dirs}
	out := make([][]Location, len(pcs))
	for i, pc := range pcs {
		out[i] = testFrameAt(sym, space, testFrame{PC: pc, Exact: true})
	}
	return out
}

// storedIndexes counts the DWARF indexes of cache that were read from
// index files.
func storedIndexes(c *Cache) int {
	n := 0
	for _, di := range c.byKey {
		if di.dw != nil && di.dw.stored != nil {
			n++
		}
	}
	return n
}

// checkPersistent symbolizes pcs four ways — in memory only, with a
// persistent cache that builds and writes the index, with a fresh one that
// reads it back, and after the file was truncated (rebuilt) — and requires
// identical results.
func checkPersistent(t *testing.T, path string, pcs []uint64, space *target.AddressSpace, dirs []string) {
	want := resolveAll(space, pcs, NewCache(), dirs)
	dir := t.TempDir()
	first := resolveAll(space, pcs, NewPersistentCache(dir), dirs)
	files, _ := filepath.Glob(filepath.Join(dir, "dwarf", "*", "*"))
	if len(files) != 1 {
		t.Fatalf("%s: index files %v, want one", path, files)
	}
	readBack := NewPersistentCache(dir)
	second := resolveAll(space, pcs, readBack, dirs)
	if storedIndexes(readBack) != 1 {
		t.Fatalf("%s: the second run did not read the index file", path)
	}
	fi, _ := os.Stat(files[0])
	if err := os.Truncate(files[0], fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	rebuilt := NewPersistentCache(dir)
	third := resolveAll(space, pcs, rebuilt, dirs)
	// The truncated file was refused, the index built again and written
	// whole (and then used as read back: see debugInfo.useSaved).
	if again, err := os.Stat(files[0]); err != nil || again.Size() != fi.Size() {
		now, _ := filepath.Glob(filepath.Join(dir, "dwarf", "*", "*"))
		t.Fatalf("%s: the truncated index file was not rewritten (%v); index files now %v", path, err, now)
	}
	for i, pc := range pcs {
		for name, got := range map[string][]Location{"writing": first[i], "reading": second[i], "after truncation": third[i]} {
			if !reflect.DeepEqual(got, want[i]) {
				t.Fatalf("%s: %#x %s the index:\n%s\nwant (in memory):\n%s", path, pc, name, formatLocs(got), formatLocs(want[i]))
			}
		}
	}
	t.Logf("%s: %d addresses agree; index file %d bytes", path, len(pcs), fi.Size())
}

// TestPersistentIndex checks that an index read from the persistent cache
// answers exactly as the DWARF it was built from, for every instruction
// of an -O2 program with inlining, and (when libc6-dbg is installed) for
// an address every 61 bytes of libc.
func TestPersistentIndex(t *testing.T) {
	exe := buildC(t, "gcc", "inline.c", "-O2", "-g", "-gdwarf-5")
	space, bias := loadSpace(t, exe)
	checkPersistent(t, exe, textPCs(t, exe, bias, 1), space, []string{})

	libc := "/lib/x86_64-linux-gnu/libc.so.6"
	space, bias = loadSpace(t, libc)
	m := space.Find(textPCs(t, libc, bias, 1<<20)[0])
	if (&Symbolizer{}).SymbolFile(m.Module) == m.Module.File {
		t.Logf("libc: no separate debug file installed (libc6-dbg); checked the fixture only")
		return
	}
	checkPersistent(t, libc, textPCs(t, libc, bias, 61), space, nil)
}

// FuzzIndexFile overwrites bytes of an encoded index and looks up every
// instruction in what decodes: a corrupt cache file must give errors or
// wrong answers, never a panic (lookups here bypass the recover of
// dwarfIndex.lookup).
func FuzzIndexFile(f *testing.F) {
	secs, pcs := fuzzSections(f)
	ix := newDWARFIndex(sourceOf(secs, binary.LittleEndian), nil)
	ix.buildAll()
	enc := ix.encode()
	f.Add(uint32(0), []byte{})
	f.Add(uint32(9), []byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add(uint32(len(enc)/2), []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01})
	f.Add(uint32(len(enc)-3), []byte{0x7f, 0x7f, 0x7f})
	f.Fuzz(func(t *testing.T, off uint32, patch []byte) {
		b := append([]byte(nil), enc...)
		copy(b[int(off)%len(b):], patch)
		if len(patch) == 1 {
			b = b[:int(off)%len(b)] // a truncation
		}
		ix, err := decodeIndex(b)
		if err != nil {
			return
		}
		for _, pc := range pcs {
			ix.lookup1(pc)
		}
	})
}
