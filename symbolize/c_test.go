package symbolize

import (
	"fmt"
	"github.com/rewindstack/rewind/elfobj"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// buildC compiles a C or C++ source from testdata into dir.
func buildC(t testing.TB, compiler, src string, flags ...string) string {
	t.Helper()
	needTool(t, compiler)
	exe := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(src), filepath.Ext(src)))
	args := append(append([]string{}, flags...), "-o", exe, filepath.Join("testdata", src))
	if out, err := exec.Command(compiler, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", compiler, strings.Join(args, " "), err, out)
	}
	return exe
}

// compareWithAddr2line symbolizes, in exe loaded at a bias, every
// instruction of funcs as an exact PC and every call's return address as a
// caller frame, and compares each expansion (inlined calls and physical
// function, names, files and lines) with addr2line -f -i -C -a at the same
// lookup address. It returns the largest number of levels seen.
func compareWithAddr2line(t *testing.T, exe string, funcs ...string) int {
	t.Helper()
	needTool(t, "addr2line")
	needTool(t, "objdump")
	insns := disassemble(t, exe, funcs...)
	if len(insns) == 0 {
		t.Fatalf("objdump found no instructions in %v", funcs)
	}
	space, bias := loadSpace(t, exe)
	type probe struct {
		frame  testFrame
		lookup uint64 // file address addr2line is asked about
	}
	var probes []probe
	var addrs []uint64
	for _, in := range insns {
		probes = append(probes, probe{testFrame{PC: in.addr + bias, Exact: true}, in.addr})
		addrs = append(addrs, in.addr)
		if in.call && in.next != 0 {
			probes = append(probes, probe{testFrame{PC: in.next + bias}, in.next - 1})
			addrs = append(addrs, in.next-1)
		}
	}
	ref := addr2line(t, "addr2line", []string{"-f", "-i", "-C", "-a", "-e", exe}, addrs)
	sym := &Symbolizer{Inlines: true, Cache: NewCache(), DebugDirs: []string{}}
	deepest, bad := 0, 0
	for _, p := range probes {
		got := testFrameAt(sym, space, p.frame)
		want := ref[p.lookup]
		deepest = max(deepest, len(got))
		if !sameFrames(got, want, nil) {
			bad++
			if bad <= 20 {
				t.Errorf("pc %#x (exact %v, file address %#x):\n    rewind:%s\n    addr2line:%s",
					p.frame.PC, p.frame.Exact, p.lookup, formatLocs(got), formatRefs(want))
			}
		}
		for i, l := range got {
			if l.Inlined != (i < len(got)-1) || l.Module != exe {
				t.Errorf("pc %#x: entry %d inlined=%v module=%q", p.frame.PC, i, l.Inlined, l.Module)
			}
		}
	}
	t.Logf("%s: %d probes compared with addr2line, %d differ, up to %d levels", filepath.Base(exe), len(probes), bad, deepest)
	return deepest
}

// TestCInlineMatchesAddr2line: two nesting levels of always_inline
// functions around a noinline leaf, at -O2 -g, PIE and not.
func TestCInlineMatchesAddr2line(t *testing.T) {
	for _, v := range []struct {
		name  string
		flags []string
	}{
		{"O2-pie", []string{"-O2", "-g"}},
		{"O2-nopie", []string{"-O2", "-g", "-no-pie", "-fno-pie"}},
		{"O1-dwarf4", []string{"-O1", "-gdwarf-4"}},
		{"O2-split-debug", []string{"-O2", "-g"}}, // debug info moved to a .debug file
	} {
		t.Run(v.name, func(t *testing.T) {
			exe := buildC(t, "gcc", "inline.c", v.flags...)
			if v.name == "O2-split-debug" {
				splitDebug(t, exe)
			}
			deepest := compareWithAddr2line(t, exe, "main", "mid", "leaf")
			if deepest < 3 {
				t.Errorf("no address with two levels of inlining (deepest %d): the test compares nothing interesting", deepest)
			}
		})
	}
}

// splitDebug moves exe's debug information to exe.debug, linked by
// .gnu_debuglink, as distributions ship it; addr2line follows the link
// too.
func splitDebug(t *testing.T, exe string) {
	t.Helper()
	needTool(t, "objcopy")
	for _, args := range [][]string{
		{"--only-keep-debug", exe, exe + ".debug"},
		{"--strip-debug", "--add-gnu-debuglink=" + exe + ".debug", exe},
	} {
		if out, err := exec.Command("objcopy", args...).CombinedOutput(); err != nil {
			t.Fatalf("objcopy %v: %v\n%s", args, err, out)
		}
	}
	if b, err := os.ReadFile(exe); err != nil || strings.Contains(string(b), ".debug_info") {
		t.Fatalf("%s still has .debug_info (%v)", exe, err)
	}
}

// libcPath returns the C library and its libc6-dbg debug file (found by
// build-id), skipping when either is missing.
func libcPath(t testing.TB) (lib, debug string) {
	t.Helper()
	lib, err := filepath.EvalSymlinks("/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil {
		t.Skipf("no libc.so.6: %v", err)
	}
	f, err := elfobjOpen(lib)
	if err != nil {
		t.Fatal(err)
	}
	id := f.BuildIDHex()
	f.Close()
	debug = filepath.Join(elfobj.DefaultDebugDir, ".build-id", id[:2], id[2:]+".debug")
	if _, err := os.Stat(debug); err != nil {
		t.Skipf("libc debug file not installed (libc6-dbg): %v", err)
	}
	return lib, debug
}

// TestLibcMatchesAddr2line compares a spread of libc addresses (calls'
// return addresses and exact PCs in exported functions), symbolized with
// the libc6-dbg debug file, with elfutils eu-addr2line on the library and
// binutils addr2line on the debug file. Inlined entries and every line
// must match; the physical function's name may be another alias of the
// same address (the symbol table's preferred name, e.g. __GI___libc_read,
// where the tools print the DWARF name __libc_read).
//
// Files are compared with eu-addr2line only: binutils 2.40 misreads some
// DWARF 5 file indexes in glibc's line tables (at 0x3b380 it says
// s_ldexp.c where the line table, as readelf --debug-dump=decodedline
// and eu-addr2line show, says s_ldexp_template.c).
func TestLibcMatchesAddr2line(t *testing.T) {
	lib, debug := libcPath(t)
	needTool(t, "objdump")
	all := disassemble(t, lib)
	// A deterministic sample: every 97th instruction and every 13th call.
	var frames []testFrame
	var lookups []uint64
	space, bias := loadSpace(t, lib)
	calls := 0
	for i, in := range all {
		if i%97 == 0 {
			frames = append(frames, testFrame{PC: in.addr + bias, Exact: true})
			lookups = append(lookups, in.addr)
		}
		if in.call && in.next != 0 {
			if calls%13 == 0 {
				frames = append(frames, testFrame{PC: in.next + bias})
				lookups = append(lookups, in.next-1)
			}
			calls++
		}
	}
	symFile, err := elfobjOpen(debug)
	if err != nil {
		t.Fatal(err)
	}
	defer symFile.Close()
	sym := &Symbolizer{Inlines: true}
	inlined := 0
	for _, tool := range []struct{ name, file string }{{"addr2line", debug}, {"eu-addr2line", lib}} {
		t.Run(tool.name, func(t *testing.T) {
			needTool(t, tool.name)
			ref := addr2line(t, tool.name, []string{"-f", "-i", "-C", "-a", "-e", tool.file}, lookups)
			bad := 0
			for i := range frames {
				got := testFrameAt(sym, space, frames[i])
				want := ref[lookups[i]]
				physical := func(j int) bool { return j < len(want)-1 }
				cmp := got
				if tool.name == "addr2line" {
					cmp = append([]Location(nil), got...)
					for j := range cmp {
						if j < len(want) {
							cmp[j].File = want[j].file
						}
					}
				}
				ok := sameFrames(cmp, want, physical)
				if ok && len(got) > 0 {
					g, w := got[len(got)-1].Function, want[len(want)-1].fn
					base := g
					if at := strings.IndexByte(g, '@'); at > 0 {
						base = g[:at] // a versioned name from .dynsym
					}
					if base != w {
						if raw := got[len(got)-1].Mangled; raw != "" {
							g = raw // versioned, as the symbol table has it
						}
						a, ok1 := symFile.SymbolByName(g)
						b, ok2 := symFile.SymbolByName(w)
						ok = ok1 && ok2 && a == b
					}
				}
				if len(got) > 1 {
					inlined++
				}
				if !ok {
					bad++
					if bad <= 10 {
						t.Errorf("pc %#x (exact %v, file address %#x):\n    rewind:%s\n    %s:%s", frames[i].PC, frames[i].Exact,
							lookups[i], formatLocs(got), tool.name, formatRefs(want))
					}
				}
			}
			t.Logf("%d libc addresses compared with %s, %d differ", len(frames), tool.name, bad)
		})
	}
	if inlined == 0 {
		t.Error("no libc address had inlined calls: the comparison did not exercise inline trees")
	}
}

// TestConcurrentSymbolize: goroutines sharing one Symbolizer and Cache
// (building the libc index and its units concurrently) get the results a
// sequential pass gets. Run with -race.
func TestConcurrentSymbolize(t *testing.T) {
	lib, _ := libcPath(t)
	space, bias := loadSpace(t, lib)
	var frames []testFrame
	for i, in := range disassemble(t, lib) {
		if i%211 == 0 {
			frames = append(frames, testFrame{PC: in.addr + bias + 1})
		}
	}
	want := make([][]Location, len(frames))
	seq := &Symbolizer{Inlines: true, Cache: NewCache()}
	for i := range frames {
		want[i] = testFrameAt(seq, space, frames[i])
	}
	shared := &Symbolizer{Inlines: true, Cache: NewCache()}
	done := make(chan error)
	const workers = 4
	for w := 0; w < workers; w++ {
		go func(w int) {
			for k := range frames {
				i := (k*7 + w*len(frames)/workers) % len(frames)
				got := testFrameAt(shared, space, frames[i])
				if formatLocs(got) != formatLocs(want[i]) {
					done <- fmt.Errorf("pc %#x: concurrent%s\n  sequential%s", frames[i].PC, formatLocs(got), formatLocs(want[i]))
					return
				}
			}
			done <- nil
		}(w)
	}
	for w := 0; w < workers; w++ {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}
