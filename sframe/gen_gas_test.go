package sframe_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/sframe"
)

// perPC compares two SFrame sections of the same object PC by PC: the
// assembler's (gas --gsframe, then ld) and the generator's.
type perPC struct {
	same, gasOnly, genOnly, differ int
	gasOnlyFlex, gasOnlyPLT        int // gas-only PCs in flexible FDEs (v3) or PLT FDEs
	gasOnlyV2, outermost           int // functions gas 2.44 keeps wrongly; RA undefined before v3
}

// gas244Keeps reports a PC of a function the generator skipped for a
// reason gas 2.44 (SFrame v2) ignores: a signal trampoline, which v2
// cannot mark, and a return address moved to another register
// (.cfi_register), which gas 2.44 drops, keeping the default rule.
func gas244Keeps(skips []sframe.Skip, pc uint64) bool {
	for _, s := range skips {
		if s.Start <= pc && pc < s.End &&
			(strings.HasPrefix(s.Reason, "signal frame") || strings.HasPrefix(s.Reason, "RA kept in ")) {
			return true
		}
	}
	return false
}

func comparePerPC(t testing.TB, name string, gas, gen *sframe.Section, genSkips []sframe.Skip) perPC {
	t.Helper()
	var c perPC
	for i := range gas.FDEs() {
		f := gas.FDE(i)
		for pc := f.Start; pc < f.End(); pc++ {
			want, ok1 := gas.Lookup(pc)
			got, ok2 := gen.Lookup(pc)
			switch {
			case !ok1:
				// A PC of an FDE the lookup does not reach (overlap).
			case !ok2 && gas.Header.Version == 2 && gas244Keeps(genSkips, pc):
				c.gasOnlyV2++
			case !ok2:
				c.gasOnly++
				if f.Flex() {
					c.gasOnlyFlex++
				} else if f.PCMask() {
					c.gasOnlyPLT++
				} else if c.gasOnly-c.gasOnlyFlex-c.gasOnlyPLT <= 5 {
					t.Logf("%s: %#x: gas has %v, the generator nothing", name, pc, want)
				}
			case want != got && got.RA.Kind == sframe.RuleUndefined && gas.Header.Version < 3:
				// .cfi_undefined rip: gas before 2.46 writes the default
				// rule, the generator an outermost FRE.
				c.outermost++
			case want != got:
				c.differ++
				if c.differ <= 10 {
					t.Errorf("%s: %#x: gas %v, generated %v (key B %v/%v, cfareg %d/%d, signal %v/%v)", name, pc, want, got, want.PAuthKeyB, got.PAuthKeyB, want.CFAReg, got.CFAReg, want.Signal, got.Signal)
				}
			default:
				c.same++
			}
		}
	}
	for i := range gen.FDEs() {
		f := gen.FDE(i)
		for pc := f.Start; pc < f.End(); pc++ {
			if _, ok := gas.Lookup(pc); !ok {
				c.genOnly++
			}
		}
	}
	return c
}

// TestGenMatchesGas: for objects assembled with --gsframe, the section
// generated from their .eh_frame describes the same rows as the
// assembler's, PC by PC. The v2 and v3 libraries were made by gas and ld
// 2.44 and 2.47 (testdata/make-fixtures.sh); the v1 programs are built now
// by the system's gas 2.40. PCs that only gas describes must be explained:
// v3 flexible FDEs (which the generator does not write) and, before
// binutils 2.41, nothing else. PCs that only the generator describes are
// PLT entries (ld 2.40 writes no SFrame for them) and functions gas 2.44
// skipped that the generator can express.
func TestGenMatchesGas(t *testing.T) {
	type obj struct {
		path    string
		version uint8
	}
	objs := []obj{
		{"testdata/v2/libfuncs-x86_64.so", 2}, {"testdata/v2/libfuncs-aarch64.so", 2}, {"testdata/v2/libspecial-x86_64.so", 2},
		{"testdata/v3/libfuncs-x86_64.so", 3}, {"testdata/v3/libfuncs-aarch64.so", 3}, {"testdata/v3/libspecial-x86_64.so", 3},
	}
	t.Run("committed", func(t *testing.T) {
		for _, o := range objs {
			o := o
			t.Run(filepath.Base(filepath.Dir(o.path))+"/"+filepath.Base(o.path), func(t *testing.T) {
				c := gasVsGen(t, o.path, o.version)
				if c.gasOnly != c.gasOnlyFlex {
					t.Errorf("%d PCs described by gas only, outside flexible FDEs", c.gasOnly-c.gasOnlyFlex)
				}
			})
		}
	})
	t.Run("gas-2.40", func(t *testing.T) {
		readelfIs240(t)
		var paths []string
		for _, p := range buildV1(t, t.TempDir()) {
			if filepath.Ext(p) != ".o" {
				paths = append(paths, p)
			}
		}
		for _, name := range []string{"threads", "recurse", "signal", "plt", "demo"} {
			paths = append(paths, fixture.Build(t, name, sframeVariant))
		}
		for _, p := range paths {
			p := p
			t.Run(filepath.Base(p), func(t *testing.T) {
				c := gasVsGen(t, p, 1)
				if c.gasOnly != 0 {
					t.Errorf("%d PCs described by gas only", c.gasOnly)
				}
			})
		}
	})
}

func gasVsGen(t *testing.T, path string, version uint8) perPC {
	f, err := elfobj.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.SFrame == nil {
		t.Fatalf("%s has no .sframe", path)
	}
	gas, err := sframe.Parse(f.SFrame.Data, f.SFrame.Addr, path+" .sframe")
	if err != nil {
		t.Fatal(err)
	}
	if gas.Header.Version != version {
		t.Fatalf("%s: gas wrote SFrame v%d, expected v%d", path, gas.Header.Version, version)
	}
	g, gen := generate(t, f, version, f.SFrame.Addr)
	c := comparePerPC(t, filepath.Base(path), gas, gen, g.Stats.Skipped)
	if c.same == 0 {
		t.Fatal("no PC in common")
	}
	t.Logf("%d PCs same; %d RA undefined only in the generated section; gas only: %d (%d in flexible FDEs, %d in PLT FDEs) "+
		"and %d in functions gas 2.44 keeps wrongly; generated only: %d; %d skipped by the generator: %v",
		c.same, c.outermost, c.gasOnly, c.gasOnlyFlex, c.gasOnlyPLT, c.gasOnlyV2, c.genOnly, len(g.Stats.Skipped), fmt.Sprint(g.Stats.Skipped))
	return c
}
