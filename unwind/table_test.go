package unwind

import (
	"encoding/binary"
	"github.com/rewindstack/rewind/target"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"

	"github.com/rewindstack/rewind/cfi"
	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/unwindtable"
)

// hashMem is memory whose every 8-byte word is a function of its address,
// so a wrong address shows up as a wrong value.
type hashMem struct{}

func (hashMem) ReadMemory(addr uint64, p []byte) error {
	for i := range p {
		a := addr + uint64(i)
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], (a&^7)*0x9e3779b97f4a7c15+1)
		p[i] = w[a&7]
	}
	return nil
}

type rowCtx struct {
	r   *regs.Regs
	mem target.Memory
}

func (c rowCtx) Reg(n int) (uint64, bool)               { return c.r.Get(n) }
func (c rowCtx) ReadMemory(addr uint64, p []byte) error { return c.mem.ReadMemory(addr, p) }

func word(m target.Memory, addr uint64) uint64 {
	var b [8]byte
	m.ReadMemory(addr, b[:])
	return binary.LittleEndian.Uint64(b[:])
}

// interpret computes the caller's CFA, return address and frame pointer
// straight from a CFI row: the reference the compiled table must match.
func interpret(t *testing.T, row *cfi.Row, raCol int, r *regs.Regs) (cfa, ra, fp uint64, raUndef bool) {
	m := hashMem{}
	ctx := rowCtx{r, m}
	switch row.CFA.Kind {
	case cfi.CFARegOffset:
		v, _ := r.Get(int(row.CFA.Reg))
		cfa = v + uint64(row.CFA.Offset)
	case cfi.CFAExpression:
		var err error
		if cfa, err = cfi.EvalExpr(row.CFA.Expr, ctx, 8); err != nil {
			t.Fatalf("row %#x: CFA expression: %v", row.Start, err)
		}
	}
	val := func(rule cfi.Rule, self int) uint64 {
		switch rule.Kind {
		case cfi.RuleSameValue:
			v, _ := r.Get(self)
			return v
		case cfi.RuleOffset:
			return word(m, cfa+uint64(rule.Offset))
		case cfi.RuleValOffset:
			return cfa + uint64(rule.Offset)
		case cfi.RuleRegister:
			v, _ := r.Get(int(rule.Reg))
			return v
		case cfi.RuleExpression:
			a, err := cfi.EvalExpr(rule.Expr, ctx, 8, cfa)
			if err != nil {
				t.Fatalf("row %#x: %v", row.Start, err)
			}
			return word(m, a)
		case cfi.RuleValExpression:
			v, err := cfi.EvalExpr(rule.Expr, ctx, 8, cfa)
			if err != nil {
				t.Fatalf("row %#x: %v", row.Start, err)
			}
			return v
		}
		return 0
	}
	if row.Regs[raCol].Kind == cfi.RuleUndefined {
		return cfa, 0, 0, true
	}
	return cfa, val(row.Regs[raCol], raCol), val(row.Regs[regs.AMD64RBP], regs.AMD64RBP), false
}

// differentialObjects are the objects the table is checked on: the system
// libc, the dynamic loader, gdb, and a freshly compiled test program.
func differentialObjects(t *testing.T) []string {
	objs := []string{"/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib64/ld-linux-x86-64.so.2", "/usr/bin/gdb"}
	if _, err := exec.LookPath("gcc"); err == nil {
		dir := t.TempDir()
		src := filepath.Join(dir, "t.c")
		os.WriteFile(src, []byte(`#include <stdio.h>
#include <string.h>
__attribute__((noinline)) int f(char *s) { char b[100]; strcpy(b, s); return puts(b); }
int main(int c, char **v) { __attribute__((aligned(64))) char x[64]; x[0] = c; return f(v[0]) + x[0]; }`), 0o644)
		for _, flags := range [][]string{{"-O2"}, {"-O0", "-g", "-fno-asynchronous-unwind-tables"}} {
			exe := filepath.Join(dir, "t"+flags[0])
			args := append(append([]string{}, flags...), src, "-o", exe)
			if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
				t.Fatalf("gcc: %v\n%s", err, out)
			}
			objs = append(objs, exe)
		}
	}
	return objs
}

func TestTableAgreesWithCFI(t *testing.T) {
	for _, path := range differentialObjects(t) {
		f, err := elfobj.Open(path)
		if err != nil {
			t.Logf("skip %s: %v", path, err)
			continue
		}
		t.Run(filepath.Base(path), func(t *testing.T) {
			defer f.Close()
			tab, err := unwindtable.BuildFile(f)
			if err != nil {
				t.Fatal(err)
			}
			checked := 0
			var ehCovered [][2]uint64
			covered := func(pc uint64) bool {
				for _, r := range ehCovered {
					if pc >= r[0] && pc < r[1] {
						return true
					}
				}
				return false
			}
			for _, s := range []*elfobj.Section{f.EhFrame, f.DebugFrame} {
				if s == nil {
					continue
				}
				kind := cfi.EhFrame
				if s == f.DebugFrame {
					kind = cfi.DebugFrame
				}
				fdes, err := cfi.Parse(unwindtable.CFISection(f, s, kind))
				if err != nil {
					t.Fatal(err)
				}
				for _, fde := range fdes {
					if kind == cfi.EhFrame {
						ehCovered = append(ehCovered, [2]uint64{fde.Start, fde.End})
					}
					fde.Rows(func(row *cfi.Row) error {
						for _, pc := range []uint64{row.Start, (row.Start + row.End) / 2, row.End - 1} {
							if kind == cfi.DebugFrame && covered(pc) {
								continue
							}
							checkPC(t, tab, fde, row, pc)
							checked++
						}
						return nil
					})
				}
			}
			// PCs between FDEs have no rule (unless .debug_frame covers them).
			sort.Slice(ehCovered, func(i, j int) bool { return ehCovered[i][0] < ehCovered[j][0] })
			gaps := 0
			for i := 0; i+1 < len(ehCovered); i++ {
				end, next := ehCovered[i][1], ehCovered[i+1][0]
				if end >= next || f.DebugFrame != nil {
					continue
				}
				for _, pc := range []uint64{end, next - 1} {
					if r, ok := tab.Lookup(pc); ok {
						t.Fatalf("pc %#x lies between FDEs but has rule %v", pc, r)
					}
					gaps++
				}
			}
			if _, ok := tab.Lookup(0); ok {
				t.Fatal("address 0 has a rule")
			}
			st := tab.Stats()
			t.Logf("%d FDEs, %d rows, %d rules, %d bytes (%.2f bytes/row), %d PCs checked, %d gap PCs",
				st.FDEs, st.Rows, st.Rules, tab.Bytes(), float64(tab.Bytes())/float64(st.Rows), checked, gaps)
			if checked == 0 {
				t.Fatal("no rows checked")
			}
		})
	}
}

func checkPC(t *testing.T, tab *unwindtable.Table, fde *cfi.FDE, row *cfi.Row, pc uint64) {
	t.Helper()
	r := regs.New(regs.AMD64)
	for n := 0; n < 16; n++ {
		r.Set(n, 0x7fff00000000+uint64(n)*0x1000)
	}
	r.Set(regs.AMD64RIP, pc)
	rule, ok := tab.Lookup(pc)
	if !ok {
		t.Fatalf("pc %#x (FDE %#x..%#x): table has no rule", pc, fde.Start, fde.End)
	}
	cfa, ra, fp, undef := interpret(t, row, int(fde.CIE.RAReg), &r)
	c := Cursor{Regs: &r, PC: pc, Exact: true, Caller: new(regs.Regs), mem: &reader{mem: hashMem{}}}
	err := ApplyRule(&c, tab, rule)
	if undef {
		if err != ErrOutermost {
			t.Fatalf("pc %#x: RA undefined in CFI, table rule %v gave %v", pc, rule, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("pc %#x: rule %v: %v", pc, rule, err)
	}
	gotSP, _ := c.Caller.SP()
	gotPC, _ := c.Caller.PC()
	gotFP, hasFP := c.Caller.FP()
	if gotSP != cfa || gotPC != ra || (hasFP && gotFP != fp) {
		t.Fatalf("pc %#x: rule %v gives cfa %#x ra %#x fp %#x(%v); CFI row gives cfa %#x ra %#x fp %#x",
			pc, rule, gotSP, gotPC, gotFP, hasFP, cfa, ra, fp)
	}
}
