package bpfunwind

import (
	"path/filepath"
	"testing"

	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwindtable"
)

// TestCompileRowsLibc compiles Debian's libc and checks, at every row
// boundary and in the middle of every row of its unwind table, that the
// row the BPF program's binary search finds carries the table's rule (or
// says it cannot apply it), and that the thread roots (clone3) are
// marked.
func TestCompileRowsLibc(t *testing.T) {
	const libc = "/lib/x86_64-linux-gnu/libc.so.6"
	objs := &target.Objects{}
	mod := objs.Module(libc)
	if mod.File == nil {
		t.Skipf("%s: %v", libc, mod.Err)
	}
	tab, err := mod.Table()
	if err != nil {
		t.Fatal(err)
	}
	marks := Marks(mod)
	rows := CompileRows(tab, marks)
	t.Logf("%d rows (%d bytes) from %d table rows, %d marks", len(rows), 24*len(rows), tab.Stats().Rows, len(marks))
	if len(rows) == 0 || len(rows) > MaxRows {
		t.Fatalf("%d rows", len(rows))
	}
	checked := 0
	tab.Rows(func(start, end uint64, r *unwindtable.Rule) {
		for _, pc := range []uint64{start, start + (end-start)/2, end - 1} {
			got, ok := Lookup(rows, pc)
			want := convert(tab, r)
			if !ok {
				t.Fatalf("%#x: no row", pc)
			}
			got.PC, got.Flags, want.Flags = 0, got.Flags&0xf0, want.Flags&0xf0
			if got != want {
				t.Fatalf("%#x: row %+v, table rule %v (%+v)", pc, got, r, want)
			}
			checked++
		}
	})
	roots := 0
	for _, m := range marks {
		if r, ok := Lookup(rows, m.Start); !ok || r.Flags&m.Flags == 0 {
			t.Errorf("mark %+v: row %+v", m, r)
		}
		if m.Flags&RowRoot != 0 {
			roots++
		}
	}
	if roots == 0 {
		t.Errorf("no thread root marked in libc (clone, clone3)")
	}
	t.Logf("%d lookups agree", checked)
}

// TestCompileRowsKinds counts, in Debian's libc, libstdc++ and Python
// 3.11, the table rows that are DWARF expressions and the rows the BPF
// walk cannot apply: the PLT stubs' expression is compiled (one row per
// file), the only others are libc's signal restorer (restored from the
// ucontext) and a few rows of its context-switching functions, whose CFA
// is in another register.
func TestCompileRowsKinds(t *testing.T) {
	for _, f := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libstdc++.so.6", "/usr/bin/python3.11"} {
		mod := (&target.Objects{}).Module(f)
		if mod.File == nil {
			t.Logf("%s: %v", f, mod.Err)
			continue
		}
		tab, err := mod.Table()
		if err != nil {
			t.Fatal(err)
		}
		var expr, plt, unsupported, total int
		tab.Rows(func(start, end uint64, r *unwindtable.Rule) {
			total++
			switch r.CFABase {
			case unwindtable.CFAPLT, unwindtable.CFARegDeref, unwindtable.CFAExpr:
				expr++
			}
			row := convert(tab, r)
			if row.CFA == CFAPLT {
				plt++
			}
			if row.CFA == CFAUnsupported {
				unsupported++
			}
		})
		t.Logf("%s: %d table rows, %d DWARF-expression CFAs (%d PLT), %d rows the walk cannot apply", f, total, expr, plt, unsupported)
		if plt == 0 {
			t.Errorf("%s: no PLT row compiled", f)
		}
		if unsupported > 10 {
			t.Errorf("%s: %d rows the walk cannot apply", f, unsupported)
		}
	}
}

// TestCompileRowsRealign compiles GCC's stack realignment through a DRAP
// register (an over-aligned local beside alloca): the function's body,
// where CFA = *(rbp - 8) and rbp is saved at rbp + 0, and its prologue and
// epilogue, where CFA = r10, compile to rows the walk applies.
func TestCompileRowsRealign(t *testing.T) {
	dir := t.TempDir()
	build(t, dir, "gcc", "-O2", "-g", "-fomit-frame-pointer", "-o", "realign", mustAbs(t, "testdata/realign.c"))
	mod := (&target.Objects{}).Module(filepath.Join(dir, "realign"))
	if mod.File == nil {
		t.Fatal(mod.Err)
	}
	tab, err := mod.Table()
	if err != nil {
		t.Fatal(err)
	}
	lo, hi, ok := mod.File.SymbolExtent("realign")
	if !ok {
		t.Fatal("no symbol realign")
	}
	rows := CompileRows(tab, nil)
	deref, prologue := 0, 0
	for pc := lo; pc < hi; pc++ {
		r, ok := Lookup(rows, pc)
		if !ok || r.CFA == CFAUnsupported || r.CFA == CFANone {
			rule, _ := tab.Lookup(pc)
			t.Errorf("%#x: row %+v, rule %v", pc, r, rule)
		}
		if r.CFA == CFAReg {
			prologue++ // CFA = r10: the prologue and epilogue
		}
		if r.CFA == CFADerefFP {
			deref++
			if r.CFAOff != -8 || r.FP != RegAtFP || r.FPOff != 0 || r.RA != RegAtCFA || r.RAOff != -8 {
				t.Errorf("%#x: DRAP row %+v", pc, r)
			}
		}
	}
	if deref < 16 || prologue == 0 {
		t.Errorf("of realign's %d bytes, %d have the DRAP body's row, %d the prologue's", hi-lo, deref, prologue)
	}
}

func mustAbs(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
