package sframe_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/sframe"
	"github.com/rewindstack/rewind/unwindtable"
)

// agree reports how an SFrame row differs from the compiled CFI rule at the
// same PC, or "" when they say the same thing. Both come from the same
// .cfi directives, so for every PC gas described they must agree on the
// CFA base and offset, and on where the RA and the FP are.
func agree(arch regs.Arch, row sframe.Row, r *unwindtable.Rule) string {
	if row.RA.Kind == sframe.RuleUndefined {
		if r.RAKind != unwindtable.RegUndefined {
			return "RA undefined in SFrame only"
		}
		return ""
	}
	switch {
	case row.CFADeref:
		if r.CFABase != unwindtable.CFARegDeref || r.CFAReg != row.CFAReg || r.CFAOffset != row.CFAOffset {
			return "CFA"
		}
	case row.CFABase == sframe.BaseSP:
		if r.CFABase != unwindtable.CFASP || r.CFAOffset != row.CFAOffset {
			return "CFA"
		}
	case row.CFABase == sframe.BaseFP:
		if r.CFABase != unwindtable.CFAFP || r.CFAOffset != row.CFAOffset {
			return "CFA"
		}
	default:
		if r.CFABase != unwindtable.CFAReg || r.CFAReg != row.CFAReg || r.CFAOffset != row.CFAOffset {
			return "CFA"
		}
	}
	reg := func(name string, x sframe.Rule, kind unwindtable.RegKind, rr uint8, off int32, self int) string {
		switch x.Kind {
		case sframe.RuleSame:
			if kind == unwindtable.RegSame || kind == unwindtable.RegInReg && int(rr) == self {
				return ""
			}
		case sframe.RuleAtCFA:
			if kind == unwindtable.RegAtCFA && off == x.Offset {
				return ""
			}
		case sframe.RuleValCFA:
			if kind == unwindtable.RegValCFA && off == x.Offset {
				return ""
			}
		case sframe.RuleReg:
			if kind == unwindtable.RegInReg && rr == x.Reg && x.Offset == 0 {
				return ""
			}
		case sframe.RuleAtReg:
			return "" // a DWARF expression in the CFI: not comparable here
		}
		return name
	}
	if d := reg("RA", row.RA, r.RAKind, r.RAReg, r.RAOffset, arch.RA()); d != "" {
		return d
	}
	if d := reg("FP", row.FP, r.FPKind, r.FPReg, r.FPOffset, arch.FP()); d != "" {
		return d
	}
	if row.RAMangled != (r.Flags&unwindtable.FlagRASigned != 0) {
		return "RA mangled"
	}
	return ""
}

// compareWithCFI checks every PC of every PCINC FDE of the object's
// .sframe against its compiled CFI table, and returns the number of PCs.
func compareWithCFI(t *testing.T, path string) int {
	f, err := elfobj.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.SFrame == nil {
		t.Fatalf("%s has no .sframe", path)
	}
	sec, err := sframe.Parse(f.SFrame.Data, f.SFrame.Addr, path+" .sframe")
	if err != nil {
		t.Fatal(err)
	}
	tab, err := unwindtable.BuildFile(f)
	if err != nil {
		t.Fatal(err)
	}
	pcs, bad, unrepresentable := 0, 0, 0
	for i := range sec.FDEs() {
		fde := sec.FDE(i)
		if fde.PCMask() {
			continue // the PLT: CFI describes it with an expression
		}
		var starts []uint32
		var rows []sframe.Row
		for e := range sec.FREs(i) {
			starts = append(starts, e.StartOffset)
			rows = append(rows, sec.RowOf(fde, &e))
		}
		for j, row := range rows {
			end := fde.Size
			if j+1 < len(starts) {
				end = starts[j+1]
			}
			for off := starts[j]; off < end; off++ {
				pc := fde.Start + uint64(off)
				pcs++
				if got, ok := sec.Lookup(pc); !ok || got != row {
					t.Errorf("%s: Lookup(%#x) = %v, %v; FRE %d of FDE %d says %v", filepath.Base(path), pc, got, ok, j, i, row)
				}
				r, ok := tab.Lookup(pc)
				if !ok {
					t.Errorf("%s: %#x has an SFrame row but no CFI", filepath.Base(path), pc)
					bad++
				} else if sec.Header.Version < 3 && row.RA.Kind != sframe.RuleUndefined &&
					(r.RAKind == unwindtable.RegUndefined || r.RAKind == unwindtable.RegInReg) {
					// SFrame before v3 cannot say "RA undefined" (as of
					// gas 2.44) or "RA in a register", yet gas 2.44 keeps
					// the FDE and records the default rule there.
					unrepresentable++
				} else if d := agree(f.Arch, row, r); d != "" {
					t.Errorf("%s: %#x: %s differs: SFrame %v, CFI %v", filepath.Base(path), pc, d, row, r)
					bad++
				}
				if bad > 10 {
					t.Fatal("too many differences")
				}
			}
		}
	}
	if unrepresentable > 0 {
		t.Logf("%s: %d PCs where the CFI's RA rule cannot be expressed in SFrame v%d and gas wrote the default rule",
			filepath.Base(path), unrepresentable, sec.Header.Version)
	}
	return pcs
}

// TestAgreesWithCFI: the generator's check. For gas-produced sections (v1
// built now by the system toolchain, v2 and v3 committed), the SFrame row
// and the CFI table's rule agree at every PC SFrame describes.
func TestAgreesWithCFI(t *testing.T) {
	paths := []string{
		"testdata/v2/libfuncs-x86_64.so", "testdata/v2/libfuncs-aarch64.so",
		"testdata/v3/libfuncs-x86_64.so", "testdata/v3/libfuncs-aarch64.so",
		"testdata/v2/libspecial-x86_64.so", "testdata/v3/libspecial-x86_64.so",
	}
	t.Run("v1-build", func(t *testing.T) {
		readelfIs240(t)
		for _, p := range buildV1(t, t.TempDir()) {
			if filepath.Ext(p) != ".o" {
				t.Run(filepath.Base(p), func(t *testing.T) {
					t.Logf("%d PCs agree", compareWithCFI(t, p))
				})
			}
		}
	})
	for _, p := range paths {
		p := p
		t.Run(fmt.Sprint(filepath.Base(filepath.Dir(p)), "/", filepath.Base(p)), func(t *testing.T) {
			t.Logf("%d PCs agree", compareWithCFI(t, p))
		})
	}
}
