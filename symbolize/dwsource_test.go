package symbolize

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/target"
)

// libcDebug returns the path of libc and of its separate debug file, or
// skips the test when libc6-dbg is not installed.
func libcDebug(t *testing.T) (string, string) {
	t.Helper()
	libc := "/lib/x86_64-linux-gnu/libc.so.6"
	f, err := elfobj.Open(libc)
	if err != nil {
		t.Skipf("no libc: %v", err)
	}
	defer f.Close()
	df := elfobj.FindDebugFile(f, []string{elfobj.DefaultDebugDir})
	if df == nil {
		t.Skip("libc has no separate debug file installed (libc6-dbg)")
	}
	defer df.Close()
	return libc, df.Path
}

// checkArangesIndex requires the index made from .debug_aranges to answer
// exactly as the one made from the unit entries, at every pc.
func checkArangesIndex(t *testing.T, path string, pcs []uint64, wantAranges bool) {
	t.Helper()
	a, err := openSource(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.aranges) == 0 {
		t.Fatalf("%s: no .debug_aranges: nothing to compare", path)
	}
	b, err := openSource(path)
	if err != nil {
		t.Fatal(err)
	}
	b.aranges = nil
	fromAranges, fromUnits := newDWARFIndex(a, nil), newDWARFIndex(b, nil)
	if fromAranges.fromAranges != wantAranges {
		t.Fatalf("%s: index from .debug_aranges: %v, want %v", path, fromAranges.fromAranges, wantAranges)
	}
	if pcs == nil {
		pcs = textPCs(t, path, 0, 1)
	}
	found := 0
	for _, pc := range pcs {
		got, gotOK := fromAranges.lookup(pc)
		want, wantOK := fromUnits.lookup(pc)
		if gotOK != wantOK || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: %#x: from .debug_aranges %v %+v, from the units %v %+v", path, pc, gotOK, got, wantOK, want)
		}
		if gotOK {
			found++
		}
	}
	if found*4 < len(pcs) {
		t.Fatalf("%s: only %d of %d addresses have DWARF", path, found, len(pcs))
	}
	t.Logf("%s: %d addresses agree (%d with DWARF)", path, len(pcs), found)
}

// TestArangesIndex checks that the units found by .debug_aranges are those
// the unit entries' ranges give (libc's debug file, when libc6-dbg is
// installed), and that a table covering too little of the code is not
// trusted (gcc's DWARF 4 and 5 for a small program, a program with a unit
// .debug_aranges leaves out).
func TestArangesIndex(t *testing.T) {
	for _, v := range []string{"-gdwarf-4", "-gdwarf-5"} {
		exe := buildC(t, "gcc", "inline.c", "-O2", "-g", v)
		// Its own code is a third of it (the rest is gcc's start-up
		// code, without debug information): too little to trust.
		checkArangesIndex(t, exe, textPCs(t, exe, 0, 1), false)
	}
	checkArangesIndex(t, partialAranges(t), nil, false)
	libc, dbg := libcDebug(t)
	checkArangesIndex(t, dbg, textPCs(t, libc, 0, 61), true)
}

// partialAranges builds a program whose .debug_aranges lists one of its
// two units (as when a unit comes from clang, which emits none by
// default); most of its code is in the unlisted one.
func partialAranges(t *testing.T) string {
	needTool(t, "gcc")
	needTool(t, "objcopy")
	dir := t.TempDir()
	big := filepath.Join(dir, "big.c")
	var src strings.Builder
	for i := 1; i <= 16; i++ {
		fmt.Fprintf(&src, "int big%d(int *a, int m) { int s = 0; for (int i = 0; i < m; i++) { s += a[i] * (i ^ %d); if (s & 0x100) s -= a[(i * 7 + %d) %% m]; else s ^= a[(i * 13 + %d) %% m] << 3; } return s; }\n", i, i, i, i)
	}
	if err := os.WriteFile(big, []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "part")
	for _, c := range [][]string{
		{"gcc", "-O2", "-g", "-c", big, "-o", big + ".o"},
		{"objcopy", "--remove-section", ".debug_aranges", big + ".o"},
		{"gcc", "-O2", "-g", "-o", exe, filepath.Join("testdata", "inline.c"), big + ".o"},
	} {
		run(t, "", c[0], c[1:]...)
	}
	return exe
}

// TestPartialRead checks that looking up one address of libc decompresses
// only part of its .debug_info, and parses only that address's unit.
func TestPartialRead(t *testing.T) {
	libc, dbg := libcDebug(t)
	src, err := openSource(dbg)
	if err != nil {
		t.Fatal(err)
	}
	ix := newDWARFIndex(src, nil)
	// The first address with DWARF: its unit is near the start.
	var pc uint64
	for _, p := range textPCs(t, libc, 0, 64) {
		if fr, ok := ix.lookup(p); ok && len(fr) > 0 && fr[len(fr)-1].name != "" {
			pc = p
			break
		}
	}
	if pc == 0 {
		t.Fatal("no address of libc has DWARF")
	}
	if len(src.info) >= int(src.infoSize)/2 {
		t.Fatalf("decompressed %d of %d bytes of .debug_info for one lookup", len(src.info), src.infoSize)
	}
	if ix.built == 0 || ix.built > 3 {
		t.Fatalf("%d units parsed for one lookup", ix.built)
	}
	t.Logf("%#x: %d of %d bytes of .debug_info, %d of %d units", pc, len(src.info), src.infoSize, ix.built, len(ix.cus))
}

// TestIncrementalCache checks that an incremental cache saves the units
// lookups needed, that a later run adds to them what it needs, and that
// every answer is the one symbolizing without a cache gives.
func TestIncrementalCache(t *testing.T) {
	exe := buildC(t, "gcc", "inline.c", "-O2", "-g")
	space, bias := loadSpace(t, exe)
	all := textPCs(t, exe, bias, 1)
	libc, _ := libcDebug(t)
	lspace, lbias := loadSpace(t, libc)
	lpcs := textPCs(t, libc, lbias, 4099)
	dir := t.TempDir()
	run := func(space *target.AddressSpace, pcs []uint64) ([][]Location, *Cache) {
		c := NewIncrementalCache(dir)
		sym := &Symbolizer{Inlines: true, Cache: c}
		var want []Want
		for _, pc := range pcs {
			want = append(want, Want{Map: space.Find(pc), PC: pc, Exact: true})
		}
		sym.Prepare(want)
		out := make([][]Location, len(pcs))
		for i, pc := range pcs {
			out[i] = testFrameAt(sym, space, testFrame{PC: pc, Exact: true})
		}
		sym.Flush()
		return out, c
	}
	check := func(space *target.AddressSpace, pcs []uint64, got [][]Location) {
		t.Helper()
		want := resolveAll(space, pcs, NewCache(), nil)
		for i := range pcs {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("%#x: incremental cache\n%s\nwant\n%s", pcs[i], formatLocs(got[i]), formatLocs(want[i]))
			}
		}
	}
	indexFile := func() (string, int64) {
		t.Helper()
		files, _ := filepath.Glob(filepath.Join(dir, "dwarf", "*", "*"))
		var libcFile string
		var size int64
		for _, f := range files {
			fi, err := os.Stat(f)
			if err == nil && fi.Size() > size {
				libcFile, size = f, fi.Size()
			}
		}
		return libcFile, size
	}

	// First run: a tenth of libc's addresses.
	first := lpcs[:len(lpcs)/10]
	got, c := run(lspace, first)
	check(lspace, first, got)
	_, size1 := indexFile()
	if size1 == 0 {
		t.Fatal("no index file written")
	}
	di := onlyIndex(t, c, libc)
	if di.dw.complete() {
		t.Fatalf("after %d addresses the index holds all %d units", len(first), len(di.dw.cus))
	}

	// Second run: the same addresses again need no DWARF at all.
	got, c = run(lspace, first)
	check(lspace, first, got)
	if di := onlyIndex(t, c, libc); di.dw.stored == nil || di.dw.src != nil {
		t.Fatalf("the second run over the same addresses read DWARF (stored %v)", di.dw.stored != nil)
	}

	// Third run: all addresses; the file grows.
	got, _ = run(lspace, lpcs)
	check(lspace, lpcs, got)
	if _, size3 := indexFile(); size3 <= size1 {
		t.Fatalf("index file %d bytes after the third run, %d after the first", size3, size1)
	}
	got, c = run(lspace, lpcs)
	check(lspace, lpcs, got)
	if di := onlyIndex(t, c, libc); di.dw.src != nil {
		t.Fatal("the fourth run read DWARF")
	}

	// A program whose every unit is looked into: a complete index.
	got, c = run(space, all)
	check(space, all, got)
	if di := onlyIndex(t, c, exe); !di.dw.complete() {
		t.Fatal("index of the fixture incomplete after looking up all its addresses")
	}
}

// onlyIndex returns the cache entry of the object at path.
func onlyIndex(t *testing.T, c *Cache, path string) *debugInfo {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, di := range c.byKey {
		if di.objPath == path && di.dw != nil {
			return di
		}
	}
	t.Fatalf("no DWARF index of %s in the cache", path)
	return nil
}

// TestPreload checks that Preload parses, in the background, the units of
// the PCs it is given, and that symbolizing after it gives what
// symbolizing without it gives.
func TestPreload(t *testing.T) {
	libc, _ := libcDebug(t)
	space, bias := loadSpace(t, libc)
	pcs := textPCs(t, libc, bias, 40009)
	var starts []Want
	for _, pc := range pcs[:3] {
		starts = append(starts, Want{Map: space.Find(pc), PC: pc, Exact: true})
	}
	c := NewIncrementalCache(t.TempDir())
	sym := &Symbolizer{Inlines: true, Cache: c}
	sym.Preload(starts)
	// Nothing else asks for a unit: the background work parses them.
	for tries := 0; ; tries++ {
		c.mu.Lock()
		var di *debugInfo
		for _, d := range c.byKey {
			if d.objPath == libc {
				di = d
			}
		}
		c.mu.Unlock()
		var ix *dwarfIndex
		if di != nil {
			ix = di.dwarf() // waits for Preload to have opened it
		}
		built := 0
		if ix != nil {
			ix.mu.Lock()
			built = ix.built
			ix.mu.Unlock()
		}
		if built > 0 {
			break
		}
		if tries > 1000 {
			t.Fatal("Preload parsed no unit")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var want []Want
	for _, pc := range pcs {
		want = append(want, Want{Map: space.Find(pc), PC: pc, Exact: true})
	}
	sym.Prepare(want)
	got := make([][]Location, len(pcs))
	for i, pc := range pcs {
		got[i] = testFrameAt(sym, space, testFrame{PC: pc, Exact: true})
	}
	ref := resolveAll(space, pcs, NewCache(), nil)
	for i := range pcs {
		if !reflect.DeepEqual(got[i], ref[i]) {
			t.Fatalf("%#x: with Preload\n%s\nwant\n%s", pcs[i], formatLocs(got[i]), formatLocs(ref[i]))
		}
	}
}

// TestIncrementalNoUnit checks that an object whose frames are in no unit
// (here libc's PLT) still gets an index file, so that the next run reads
// its unit table instead of opening its DWARF.
func TestIncrementalNoUnit(t *testing.T) {
	libc, _ := libcDebug(t)
	ef, err := elf.Open(libc)
	if err != nil {
		t.Fatal(err)
	}
	plt := ef.Section(".plt")
	ef.Close()
	if plt == nil {
		t.Skip("libc has no .plt")
	}
	space, bias := loadSpace(t, libc)
	pc := plt.Addr + bias + 16
	dir := t.TempDir()
	for run := 0; run < 2; run++ {
		c := NewIncrementalCache(dir)
		sym := &Symbolizer{Inlines: true, Cache: c}
		sym.Prepare([]Want{{Map: space.Find(pc), PC: pc, Exact: true}})
		testFrameAt(sym, space, testFrame{PC: pc, Exact: true})
		sym.Flush()
		di := onlyIndex(t, c, libc)
		if run == 0 {
			if di.dw.built != 0 {
				t.Fatalf("%d units parsed for a PLT address", di.dw.built)
			}
			files, _ := filepath.Glob(filepath.Join(dir, "dwarf", "*", "*"))
			if len(files) != 1 {
				t.Fatalf("index files %v after the first run, want one", files)
			}
		} else if di.dw.stored == nil || di.dw.src != nil {
			t.Fatalf("the second run opened the DWARF (index read: %v)", di.dw.stored != nil)
		}
	}
}
