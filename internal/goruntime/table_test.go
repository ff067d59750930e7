package goruntime

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"testing"

	"github.com/rewindstack/rewind/internal/fileerr"
	"github.com/rewindstack/rewind/internal/testutil/fuzzcorpus"
	"github.com/rewindstack/rewind/target"
)

// needTool skips the test when a reference tool is missing.
func needTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not installed: %v", name, err)
	}
	return p
}

// buildGo builds the symbolizer's test program for this machine.
func buildGo(t testing.TB, flags ...string) string { return buildGoArch(t, runtime.GOARCH, flags...) }

// buildGoArch builds the symbolizer's test program (its
// testdata/gostack, whose frames its tests compare with the runtime's)
// for GOARCH=arch.
func buildGoArch(t testing.TB, arch string, flags ...string) string {
	t.Helper()
	goTool := needTool(t, "go")
	exe := filepath.Join(t.TempDir(), "gostack-"+arch)
	cmd := exec.Command(goTool, append(append([]string{"build", "-o", exe}, flags...), ".")...)
	cmd.Dir = filepath.Join("..", "..", "symbolize", "testdata", "gostack")
	cmd.Env = append(os.Environ(), "GOFLAGS=", "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %v (%s): %v\n%s", flags, arch, err, out)
	}
	return exe
}

// testGoTable opens the pcln table of the Go executable at path.
func testGoTable(t testing.TB, path string) *Table {
	t.Helper()
	g := TableOf((&target.Objects{}).Module(path))
	if g == nil {
		t.Fatalf("%s: no Go pcln table", path)
	}
	return g
}

// cfaRow is one row of readelf's decoded .debug_frame: from loc on, the
// CFA is the stack pointer plus off.
type cfaRow struct{ loc, off uint64 }

var (
	fdeRE = regexp.MustCompile(`FDE cie=\S+ pc=([0-9a-f]+)\.\.([0-9a-f]+)`)
	rowRE = regexp.MustCompile(`^([0-9a-f]{8,16}) +r?sp\+(\d+) `)
)

// readelfFrames runs `readelf --debug-dump=frames-interp` on exe and
// returns its FDEs' extents and CFA rows.
func readelfFrames(t *testing.T, exe string) (fdes [][2]uint64, rows []cfaRow) {
	t.Helper()
	readelf := needTool(t, "readelf")
	out, err := exec.Command(readelf, "--debug-dump=frames-interp", exe).Output()
	if err != nil {
		t.Fatalf("readelf: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	inFDE := false
	for sc.Scan() {
		line := sc.Text()
		if m := fdeRE.FindStringSubmatch(line); m != nil {
			lo, _ := strconv.ParseUint(m[1], 16, 64)
			hi, _ := strconv.ParseUint(m[2], 16, 64)
			fdes = append(fdes, [2]uint64{lo, hi})
			inFDE = true
			continue
		}
		if m := rowRE.FindStringSubmatch(line); m != nil && inFDE {
			loc, _ := strconv.ParseUint(m[1], 16, 64)
			off, _ := strconv.ParseUint(m[2], 10, 64)
			rows = append(rows, cfaRow{loc, off})
		}
		if line == "" {
			inFDE = false
		}
	}
	if len(fdes) < 100 || len(rows) < len(fdes) {
		t.Fatalf("readelf printed %d FDEs and %d rows:\n%.2000s", len(fdes), len(rows), out)
	}
	return fdes, rows
}

// TestGoSPDeltaMatchesDebugFrame reads the SP delta of every CFA row that
// readelf decodes from a Go program's .debug_frame (which Go's linker
// writes from the pcsp tables) out of the pcln table of the same program
// built with -ldflags='-s -w', for amd64 (CFA = SP+delta+8, the return
// address pushed by the call) and arm64 (CFA = SP+delta), and checks that
// every FDE starts a function of the table.
func TestGoSPDeltaMatchesDebugFrame(t *testing.T) {
	for _, arch := range []string{"amd64", "arm64"} {
		t.Run(arch, func(t *testing.T) {
			full := buildGoArch(t, arch)
			stripped := buildGoArch(t, arch, "-ldflags=-s -w")
			if ef, err := elf.Open(stripped); err != nil {
				t.Fatal(err)
			} else {
				if ef.Section(".symtab") != nil || ef.Section(".debug_frame") != nil {
					t.Fatal("the -s -w build has a symbol table or .debug_frame")
				}
				ef.Close()
			}
			fdes, rows := readelfFrames(t, full)
			g := testGoTable(t, stripped)
			for _, fde := range fdes {
				f, ok := g.Func(fde[0])
				// The table's extent runs to the next function,
				// over the alignment padding the FDE leaves out.
				if !ok || f.Entry != fde[0] || f.End < fde[1] {
					t.Errorf("FDE %#x..%#x: table function %#x..%#x (found %v)", fde[0], fde[1], f.Entry, f.End, ok)
				}
			}
			ret := uint64(8)
			if arch == "arm64" {
				ret = 0
			}
			bad := 0
			for _, r := range rows {
				f, ok := g.Func(r.loc)
				if !ok {
					t.Errorf("row %#x: no function", r.loc)
					continue
				}
				d, err := g.SPDelta(&f, r.loc)
				if err != nil || uint64(d)+ret != r.off {
					if bad++; bad < 10 {
						t.Errorf("%s at %#x: delta %d (%v), readelf's CFA is sp+%d", g.Name(&f), r.loc, d, err, r.off)
					}
				}
			}
			t.Logf("%d functions, %d rows agree", len(fdes), len(rows)-bad)
		})
	}
}

// TestGoTableStripped: a stripped program's root functions and flags come
// from its pcln table, starting where its unstripped build's symbol table
// says they do.
func TestGoTableStripped(t *testing.T) {
	full := buildGoArch(t, "amd64")
	stripped := buildGoArch(t, "amd64", "-ldflags=-s -w")
	ef, err := elf.Open(full)
	if err != nil {
		t.Fatal(err)
	}
	syms, err := ef.Symbols()
	ef.Close()
	if err != nil {
		t.Fatal(err)
	}
	ext := map[string][2]uint64{}
	for _, s := range syms {
		ext[s.Name] = [2]uint64{s.Value, s.Value + s.Size}
	}
	roots := RootRanges((&target.Objects{}).Module(stripped))
	for _, name := range []string{"runtime.goexit", "runtime.mstart", "runtime.rt0_go", "_rt0_amd64_linux", "_rt0_amd64"} {
		e, ok := ext[name+".abi0"]
		if !ok {
			e, ok = ext[name]
		}
		if !ok {
			t.Fatalf("no symbol %s in the unstripped build", name)
		}
		found := false
		for _, r := range roots {
			// The table's extent includes the alignment padding.
			found = found || r.Start == e[0] && r.End >= e[1] && r.Kind == GoTopFrame
		}
		if !found {
			t.Errorf("%s [%#x, %#x): not among the stripped build's roots %+v", name, e[0], e[1], roots)
		}
	}
	g := testGoTable(t, stripped)
	for name, want := range map[string]FuncFlag{"runtime.goexit": FlagTopFrame, "runtime.systemstack": FlagSPWrite, "runtime.mcall": FlagSPWrite, "runtime.futex": FlagAsm} {
		e := g.Extents([]string{name})[name]
		f, ok := g.Func(e[0])
		if !ok || g.Name(&f) != name || f.Flag&want == 0 {
			t.Errorf("%s: flags %#x (found %v as %q), want %#x set", name, f.Flag, ok, g.Name(&f), want)
		}
	}
	if f, ok := g.Func(ext["main.main"][0]); !ok || f.Flag != 0 {
		t.Errorf("main.main: flags %#x (found %v), want none", f.Flag, ok)
	}
}

// TestGoSPDeltaErrors: SP deltas of a damaged pcsp table are errors that
// name the table's offset, not values.
func TestGoSPDeltaErrors(t *testing.T) {
	exe := buildGoArch(t, "amd64", "-ldflags=-s -w")
	g := testGoTable(t, exe)
	e := g.Extents([]string{"main.main"})["main.main"]
	f, ok := g.Func(e[0])
	if !ok {
		t.Fatal("no main.main")
	}
	if _, err := g.SPDelta(&f, f.End); err == nil {
		t.Error("a delta past the function's end")
	}
	// Truncate pctab just after main.main's pcsp table begins.
	t2 := &goTable{bo: g.t.bo, quantum: g.t.quantum, pctab: g.t.pctab[:f.pcsp+1], pctabOff: g.t.pctabOff}
	g2 := &Table{t: t2, path: "damaged"}
	_, err := g2.SPDelta(&f, f.End-1)
	var fe *fileerr.FormatError
	if !errors.As(err, &fe) || fe.Section != ".gopclntab" || fe.Offset < g.t.pctabOff+uint64(f.pcsp) {
		t.Errorf("truncated pcsp table: %v", err)
	} else {
		t.Log(err)
	}
}

// fuzzGoRegions are the parts of the pcln table FuzzGoSPDelta's which
// argument selects: the header, the function table, the pc-value tables,
// the function names.
func fuzzGoRegions(t *goTable, n int) [4]uint64 {
	return [4]uint64{0, t.functabOff, t.pctabOff, uint64(n - len(t.funcnames))}
}

// FuzzGoSPDelta overwrites bytes in one part of a Go pcln table and looks
// up functions, SP deltas and names over the text: nothing may panic, and
// every SP delta error is a FormatError whose offset lies in the table.
func FuzzGoSPDelta(f *testing.F) {
	exe := buildGo(f, "-ldflags=-s -w")
	ef, err := elf.Open(exe)
	if err != nil {
		f.Fatal(err)
	}
	gt, err := openGoTable(ef)
	s := ef.Section(".gopclntab")
	text := ef.Section(".text")
	ef.Close()
	if err != nil || s == nil || text == nil {
		f.Fatalf("no Go table: %v", err)
	}
	orig, err := os.ReadFile(exe)
	if err != nil {
		f.Fatal(err)
	}
	pcln := orig[s.Offset : s.Offset+s.Size]
	regions := fuzzGoRegions(gt, len(pcln))
	f.Fuzz(func(t *testing.T, which int, off uint64, patch []byte) {
		b := append([]byte(nil), pcln...)
		start := regions[uint(which)%4]
		copy(b[start+off%(uint64(len(b))-start):], patch)
		t2, err := parseGoHeader(b)
		if err != nil {
			return
		}
		t2.text = gt.text
		g := &Table{t: t2, path: "fuzz"}
		step := max(text.Size/509, 1)
		for pc := text.Addr; pc < text.Addr+text.Size; pc += step {
			fn, ok := g.Func(pc)
			if !ok {
				continue
			}
			g.Name(&fn)
			if _, err := g.SPDelta(&fn, pc); err != nil {
				var fe *fileerr.FormatError
				if !errors.As(err, &fe) || fe.Offset > uint64(len(b)) {
					t.Fatalf("SP delta at %#x: %v", pc, err)
				}
			}
		}
		g.Extents([]string{"runtime.mstart", "runtime.goexit", "main.main"})
	})
}

// TestWriteGoSPDeltaSeeds regenerates testdata/fuzz/FuzzGoSPDelta
// (REWIND_WRITE_SEEDS=1): damage in each region of the table.
func TestWriteGoSPDeltaSeeds(t *testing.T) {
	if os.Getenv("REWIND_WRITE_SEEDS") == "" {
		t.Skip("set REWIND_WRITE_SEEDS=1 to regenerate testdata/fuzz/FuzzGoSPDelta")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzGoSPDelta")
	seeds := []struct {
		name  string
		which int
		off   uint64
		patch []byte
	}{
		{"magic", 0, 0, []byte{0xf0, 0xff}},
		{"nfunc", 0, 8, []byte{0xff, 0xff, 0xff, 0x7f}},
		{"pclnoffset", 0, 8 + 7*8, []byte{0xff, 0xff, 0xff}},
		{"ftab-entry", 1, 8, []byte{0xff, 0xff, 0xff, 0xff}},
		{"ftab-funcoff", 1, 12, []byte{0xf0, 0xff, 0xff, 0x0f}},
		{"func-pcsp", 1, 1 << 12, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		{"pctab-varint", 2, 1, []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}},
		{"pctab-end", 2, 64, []byte{0x00, 0x00, 0x00, 0x00}},
		{"pctab-odd", 2, 1 << 10, []byte{0x03, 0x01, 0x05, 0x01}},
		{"names", 3, 0, []byte("runtime.mstart\x00")},
	}
	for _, s := range seeds {
		if err := fuzzcorpus.Write(dir, s.name, s.which, s.off, s.patch); err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkGoSPDelta measures what one gopclntab step asks of the table:
// the function holding a PC and its SP delta there, at PCs spread over a
// Go program's functions.
func BenchmarkGoSPDelta(b *testing.B) {
	g := testGoTable(b, buildGo(b, "-ldflags=-s -w"))
	var pcs []uint64
	g.each(func(f *Func) bool {
		pc := f.Entry + (f.End-f.Entry)/4
		if _, err := g.SPDelta(f, pc); err == nil {
			pcs = append(pcs, pc)
		}
		return true
	})
	b.ReportMetric(float64(len(pcs)), "functions")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pc := pcs[(i*7919)%len(pcs)]
		f, ok := g.Func(pc)
		if !ok {
			b.Fatal("miss")
		}
		if _, err := g.SPDelta(&f, pc); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzGoTable overwrites bytes of a Go pcln table and looks up PCs.
func FuzzGoTable(f *testing.F) {
	exe := buildGo(f)
	ef, err := elf.Open(exe)
	if err != nil {
		f.Fatal(err)
	}
	gt, err := openGoTable(ef)
	s := ef.Section(".gopclntab")
	ef.Close()
	if err != nil || s == nil {
		f.Fatalf("no Go table: %v", err)
	}
	orig, _ := os.ReadFile(exe)
	pcln := orig[s.Offset : s.Offset+s.Size]
	gofuncOff := len(pcln) - len(gt.gofunc)
	f.Add(uint32(0), []byte{0xf1, 0xff})
	f.Add(uint32(100), []byte{0xff, 0xff, 0xff, 0x7f})
	f.Add(uint32(len(pcln)/2), []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x01})
	f.Fuzz(func(t *testing.T, off uint32, patch []byte) {
		b := append([]byte(nil), pcln...)
		copy(b[int(off)%len(b):], patch)
		t2, err := parseGoHeader(b)
		if err != nil {
			return
		}
		t2.text = gt.text
		if gt.gofunc != nil {
			t2.gofunc = b[gofuncOff:]
		}
		for pc := gt.text; pc < gt.text+0x2000; pc += 7 {
			t2.lookup(pc)
		}
	})
}
