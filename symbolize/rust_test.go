package symbolize

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// buildRust compiles testdata/names.rs with full debug info and
// optimisation (so closures and #[inline(always)] helpers are inlined)
// under a symbol mangling scheme. Legacy mangling is unstable on current
// compilers, so it needs -Z unstable-options (RUSTC_BOOTSTRAP=1).
func buildRust(t *testing.T, mangling string) string {
	t.Helper()
	rustc, err := exec.LookPath("rustc")
	if err != nil {
		if home, herr := os.UserHomeDir(); herr == nil {
			if p := filepath.Join(home, ".cargo", "bin", "rustc"); fileExists(p) {
				rustc, err = p, nil
			}
		}
	}
	if err != nil {
		t.Skipf("rustc not installed (%v): Rust demangling and inlining not tested", err)
	}
	exe := filepath.Join(t.TempDir(), "names_"+mangling)
	args := []string{"-C", "debuginfo=2", "-C", "opt-level=2", "-C", "symbol-mangling-version=" + mangling, "-o", exe, filepath.Join("testdata", "names.rs")}
	cmd := exec.Command(rustc, args...)
	if mangling == "legacy" {
		cmd.Args = append([]string{rustc, "-Z", "unstable-options"}, args...)
		cmd.Env = append(os.Environ(), "RUSTC_BOOTSTRAP=1")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
	}
	return exe
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestRustMatchesBinutils, for v0 and legacy mangling: every Rust
// function symbol's name (the crate's and the standard library's) is
// binutils' demangling of it (nm -C: no legacy hash, no crate
// disambiguators, like rustfilt), a few names are exactly what we
// expect by reading the source, and the crate's functions expand
// (inlined closures and iterator adapters, several levels) as
// addr2line -f -i -C does.
func TestRustMatchesBinutils(t *testing.T) {
	needTool(t, "nm")
	for _, c := range []struct {
		mangling string
		want     []string
	}{
		{"v0", []string{
			"names::shapes::total::<names::shapes::Circle>",
			"<names::shapes::Circle as names::shapes::Area>::area",
			"names::run",
		}},
		{"legacy", []string{
			"names::shapes::total",
			"<names::shapes::Circle as names::shapes::Area>::area",
			"names::run",
		}},
	} {
		t.Run(c.mangling, func(t *testing.T) {
			exe := buildRust(t, c.mangling)
			syms := nmFuncs(t, exe)
			space, bias := loadSpace(t, exe)
			sym := &Symbolizer{Cache: NewCache()}
			byRaw := map[string]string{}
			got := map[string]bool{}
			var crate []string
			n, bad := 0, 0
			for _, s := range syms {
				if !strings.HasPrefix(s.raw, "_R") && !strings.HasPrefix(s.raw, "_ZN") {
					continue
				}
				byRaw[s.raw] = s.dem
				n++
				if d := Demangle(s.raw); d != s.dem {
					bad++
					if bad <= 10 {
						t.Errorf("%s: rewind %q, nm -C %q", s.raw, d, s.dem)
					}
				}
				if strings.Contains(s.raw, "5names") {
					crate = append(crate, s.raw)
				}
			}
			// Symbolizing goes through the same names (where identical
			// code was folded, the symbol table's preferred alias).
			for _, s := range syms {
				loc := sym.Addr(space, s.addr+bias)
				if want, ok := byRaw[loc.Mangled]; ok {
					got[loc.Function] = true
					if loc.Function != want || loc.Offset != 0 {
						t.Errorf("%#x: %q+%#x, nm -C says %q", s.addr, loc.Function, loc.Offset, want)
					}
				}
			}
			t.Logf("%d Rust function names compared with nm -C, %d differ", n, bad)
			for _, w := range c.want {
				if !got[w] {
					t.Errorf("no function named %q", w)
				}
			}
			if deepest := compareWithAddr2line(t, exe, crate...); deepest < 3 {
				t.Errorf("deepest expansion %d: inlining not exercised", deepest)
			}
		})
	}
}

type nmSym struct {
	addr     uint64
	raw, dem string
}

// nmFuncs returns the text symbols of exe, raw and as nm -C demangles
// them.
func nmFuncs(t *testing.T, exe string) []nmSym {
	list := func(args ...string) []string {
		return strings.Split(strings.TrimSpace(run(t, "", "nm", append(args, "--defined-only", exe)...)), "\n")
	}
	raw, dem := list(), list("-C")
	if len(raw) != len(dem) {
		t.Fatalf("nm listed %d symbols, nm -C %d", len(raw), len(dem))
	}
	var res []nmSym
	for i := range raw {
		r, d := strings.SplitN(raw[i], " ", 3), strings.SplitN(dem[i], " ", 3)
		if len(r) != 3 || len(d) != 3 || (r[1] != "t" && r[1] != "T") {
			continue
		}
		a, err := strconv.ParseUint(r[0], 16, 64)
		if err != nil {
			continue
		}
		res = append(res, nmSym{a, r[2], d[2]})
	}
	return res
}
