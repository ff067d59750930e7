package sframe_test

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/cfi"
	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/sframe"
	"github.com/rewindstack/rewind/unwindtable"
)

var long = flag.Bool("long", false, "also run the generator's differential check on gdb and cc1 (slow)")

// generate compiles an object's CFI into a parsed SFrame section placed at
// addr.
func generate(t testing.TB, f *elfobj.File, version uint8, addr uint64) (*sframe.Generated, *sframe.Section) {
	t.Helper()
	g, err := sframe.Generate(f, sframe.GenOptions{Version: version})
	if err != nil {
		t.Fatal(err)
	}
	data, err := g.Encode(addr)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) != g.Size() {
		t.Fatalf("Encode wrote %d bytes, Size says %d", len(data), g.Size())
	}
	sec, err := sframe.Parse(data, addr, f.Path+" generated .sframe")
	if err != nil {
		t.Fatalf("the generated section does not parse: %v", err)
	}
	if !sec.Sorted() {
		t.Errorf("generated FDEs are not sorted")
	}
	if sec.Header.Version != g.Version {
		t.Errorf("version %d, want %d", sec.Header.Version, g.Version)
	}
	return g, sec
}

// pltAgree checks an SFrame row against the CFI table's PLT expression
// rule at pc.
func pltAgree(pc uint64, row sframe.Row, r *unwindtable.Rule) string {
	want := r.CFAOffset
	if uint8(pc&15) >= r.CFAReg {
		want += 8
	}
	if row.CFABase != sframe.BaseSP || row.CFADeref || row.CFAOffset != want {
		return "PLT CFA"
	}
	if row.RA.Kind != sframe.RuleAtCFA || row.RA.Offset != -8 || r.RAKind != unwindtable.RegAtCFA || r.RAOffset != -8 {
		return "PLT RA"
	}
	if row.FP.Kind != sframe.RuleSame || r.FPKind != unwindtable.RegSame {
		return "PLT FP"
	}
	return ""
}

// atRegAgree compares what agree leaves out: a register saved at another
// register plus an offset (flexible FDEs), which the CFI table keeps as a
// DW_CFA_expression "DW_OP_bregR off".
func atRegAgree(tab *unwindtable.Table, row sframe.Row, r *unwindtable.Rule) string {
	check := func(name string, x sframe.Rule, kind unwindtable.RegKind, off int32) string {
		if x.Kind != sframe.RuleAtReg {
			return ""
		}
		if kind != unwindtable.RegExpr {
			return name
		}
		reg, o, deref, ok := cfi.MatchBreg(tab.Expr(off))
		if !ok || deref || int(reg) != int(x.Reg) || o != int64(x.Offset) {
			return name
		}
		return ""
	}
	if d := check("RA", row.RA, r.RAKind, r.RAOffset); d != "" {
		return d
	}
	return check("FP", row.FP, r.FPKind, r.FPOffset)
}

// diffStats counts what the differential check saw.
type diffStats struct {
	pcs, skippedPCs, pltPCs int
}

// diffCheck is the generator's differential check: for every PC the
// object's compiled CFI table covers, the generated section must either
// give the same rule (agree, from cfi_test.go) or leave the PC out because
// the generator reported its function as skipped; and the generated
// section must cover no PC that the CFI does not.
func diffCheck(t testing.TB, path string, version uint8) diffStats {
	t.Helper()
	f, err := elfobj.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g, sec := generate(t, f, version, 0x7000_0000)
	tab, err := unwindtable.BuildFile(f)
	if err != nil {
		t.Fatal(err)
	}
	skipped := append([]sframe.Skip(nil), g.Stats.Skipped...)
	sort.Slice(skipped, func(i, j int) bool { return skipped[i].Start < skipped[j].Start })
	inSkipped := func(pc uint64) bool {
		i := sort.Search(len(skipped), func(i int) bool { return skipped[i].Start > pc }) - 1
		return i >= 0 && pc < skipped[i].End
	}
	var st diffStats
	bad := 0
	report := func(format string, args ...any) {
		t.Helper()
		bad++
		if bad <= 10 {
			t.Errorf("%s v%d: "+format, append([]any{filepath.Base(path), version}, args...)...)
		}
	}
	tab.Rows(func(start, end uint64, r *unwindtable.Rule) {
		if r.CFABase == unwindtable.CFANone {
			return
		}
		for pc := start; pc < end; pc++ {
			row, ok := sec.Lookup(pc)
			if !ok {
				if inSkipped(pc) {
					st.skippedPCs++
				} else {
					report("%#x: CFI rule %v, no SFrame row and no skip reported", pc, r)
				}
				continue
			}
			st.pcs++
			var d string
			if r.CFABase == unwindtable.CFAPLT {
				st.pltPCs++
				d = pltAgree(pc, row, r)
			} else {
				d = agree(f.Arch, row, r)
				if d == "" {
					d = atRegAgree(tab, row, r)
				}
			}
			if d != "" {
				report("%#x: %s differs: SFrame %v, CFI %v", pc, d, row, r)
			}
		}
	})
	covered := 0
	for i := range sec.FDEs() {
		covered += int(sec.FDE(i).Size)
	}
	if covered != st.pcs {
		report("the SFrame FDEs cover %d PCs, of which %d have CFI", covered, st.pcs)
	}
	if bad > 10 {
		t.Errorf("... %d differences in all", bad)
	}
	return st
}

// TestGenDifferential runs the differential check on the system's libc and
// dynamic loader and on this package's v2/v3 fixture libraries, for every
// version the generator writes.
func TestGenDifferential(t *testing.T) {
	paths := []string{
		"/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2",
		"testdata/v2/libfuncs-x86_64.so", "testdata/v2/libfuncs-aarch64.so", "testdata/v3/libspecial-x86_64.so",
	}
	if *long {
		paths = append(paths, longPaths(t)...)
	}
	for _, p := range paths {
		for _, v := range []uint8{1, 2, 3} {
			p, v := p, v
			t.Run(fmt.Sprintf("%s/v%d", filepath.Base(p), v), func(t *testing.T) {
				if _, err := os.Stat(p); err != nil {
					t.Fatal(err)
				}
				st := diffCheck(t, p, v)
				if st.pcs == 0 {
					t.Fatal("no PC checked")
				}
				t.Logf("%d PCs agree (%d in PLT entries), %d PCs in skipped functions", st.pcs, st.pltPCs, st.skippedPCs)
			})
		}
	}
}

// longPaths returns gdb and cc1, the large objects of the -long check.
func longPaths(t testing.TB) []string {
	var out []string
	if p, err := exec.LookPath("gdb"); err == nil {
		out = append(out, p)
	} else {
		t.Fatalf("gdb is not installed (apt-get install gdb): %v", err)
	}
	b, err := exec.Command("gcc", "-print-prog-name=cc1").Output()
	if err != nil {
		t.Fatalf("gcc -print-prog-name=cc1: %v", err)
	}
	out = append(out, strings.TrimSpace(string(b)))
	return out
}
