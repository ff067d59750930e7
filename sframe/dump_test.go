package sframe_test

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/sframe"
)

// open parses the .sframe of an ELF file, relocating relocatable objects
// when asked (as readelf 2.46+ does).
func open(t testing.TB, path string, relocate bool) *sframe.Section {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := sframe.FromELF(f, path, "", relocate)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func dumpString(t testing.TB, s *sframe.Section, style sframe.Style) string {
	t.Helper()
	var b bytes.Buffer
	if err := sframe.Dump(&b, s, &sframe.DumpOptions{Style: style}); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestDumpFixtures compares Dump with the output of readelf --sframe of
// binutils 2.44 (SFrame v2) and 2.47.50 (SFrame v3), committed next to the
// objects make-fixtures.sh built with the same binutils.
func TestDumpFixtures(t *testing.T) {
	for _, dir := range []struct {
		name    string
		version uint8
		style   sframe.Style
	}{{"v2", 2, sframe.Readelf244}, {"v3", 3, sframe.Readelf247}} {
		txts, err := filepath.Glob(filepath.Join("testdata", dir.name, "*.txt"))
		if err != nil || len(txts) == 0 {
			t.Fatalf("no fixtures in testdata/%s: %v", dir.name, err)
		}
		for _, txt := range txts {
			obj := strings.TrimSuffix(txt, ".txt")
			t.Run(dir.name+"/"+filepath.Base(obj), func(t *testing.T) {
				want, err := os.ReadFile(txt)
				if err != nil {
					t.Fatal(err)
				}
				s := open(t, obj, dir.style == sframe.Readelf247)
				if s.Header.Version != dir.version {
					t.Fatalf("version %d, want %d", s.Header.Version, dir.version)
				}
				// StyleAuto picks the same readelf for the version.
				if got := dumpString(t, s, sframe.StyleAuto); got != string(want) {
					t.Errorf("dump differs from readelf:\n%s", diffLines(string(want), got))
				}
			})
		}
	}
}

// diffLines shows the first differing lines of two texts.
func diffLines(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d:\n  readelf: %q\n  ours:    %q\n", i+1, wl, gl)
			if shown++; shown == 5 {
				break
			}
		}
	}
	return b.String()
}

// liveSources are compiled at test time by the system gcc/as (binutils
// 2.40 on Debian bookworm, so SFrame v1) for TestDumpLiveV1.
var liveSources = map[string]string{
	"shapes.c": `
#include <stdlib.h>
#include <string.h>
extern int sink(int);
int leaf(int x) { return x * 3; }
int dyn(int n) { char *p = __builtin_alloca(n); memset(p, 1, n); return p[n/2] + leaf(n); }
__attribute__((noreturn)) void die(int c) { sink(c); abort(); }
__attribute__((force_align_arg_pointer)) int realign(int n) {
	int __attribute__((aligned(64))) buf[16];
	for (int i = 0; i < 16; i++) buf[i] = sink(i * n);
	return buf[n & 15];
}
int aligned(int n) { int __attribute__((aligned(64))) b[16]; for (int i = 0; i < 16; i++) b[i] = sink(i); return b[n & 15]; }
int sink(int x) { return x + 1; }
int main(int argc, char **argv) { (void)argv; return dyn(argc) + realign(argc) + aligned(argc) + (malloc(argc) != 0); }
`,
	"big.s": `
	.text
	.globl	big
	.type	big, @function
big:
	.cfi_startproc
	subq	$40000, %rsp
	.cfi_def_cfa_offset 40008
	.skip	300, 0x90
	subq	$100000, %rsp
	.cfi_def_cfa_offset 140008
	.skip	70000, 0x90
	addq	$140000, %rsp
	.cfi_def_cfa_offset 8
	ret
	.cfi_endproc
	.size	big, .-big
	.section	.note.GNU-stack,"",@progbits
`,
}

// manyFunctions returns C source with n small functions of a few shapes.
func manyFunctions(n int) string {
	var b strings.Builder
	b.WriteString("extern int ext(int);\n")
	for i := 0; i < n; i++ {
		switch i % 3 {
		case 0:
			fmt.Fprintf(&b, "int f%d(int x) { return x + %d; }\n", i, i)
		case 1:
			fmt.Fprintf(&b, "int f%d(int x) { return ext(x) * %d + ext(x + 1); }\n", i, i)
		default:
			fmt.Fprintf(&b, "int f%d(int x) { int a[%d]; for (int i = 0; i < %d; i++) a[i] = ext(i + x); return a[x & %d]; }\n", i, 8+i%40, 8+i%40, 7)
		}
	}
	return b.String()
}

// readelfIs240 reports whether the system readelf is binutils 2.40, whose
// --sframe output the Readelf240 style reproduces.
func readelfIs240(t testing.TB) {
	t.Helper()
	out, err := exec.Command("readelf", "--version").Output()
	if err != nil {
		t.Skipf("readelf: %v", err)
	}
	if !strings.Contains(strings.SplitN(string(out), "\n", 2)[0], " 2.40") {
		t.Skipf("system readelf is not binutils 2.40: %s", strings.SplitN(string(out), "\n", 2)[0])
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skipf("gcc: %v", err)
	}
}

// buildV1 compiles the live sources with the system toolchain into dir and
// returns the objects, executables and shared libraries made.
func buildV1(t testing.TB, dir string) []string {
	t.Helper()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	run := func(args ...string) {
		if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	shapes := write("shapes.c", liveSources["shapes.c"])
	big := write("big.s", liveSources["big.s"])
	many := write("many.c", manyFunctions(300))
	var outs []string
	for _, opt := range []string{"-O0", "-O2"} {
		o := filepath.Join(dir, "shapes"+opt+".o")
		run(opt, "-Wa,--gsframe", "-c", "-o", o, shapes)
		exe := filepath.Join(dir, "shapes"+opt)
		run(opt, "-Wa,--gsframe", "-o", exe, shapes)
		m := filepath.Join(dir, "many"+opt+".o")
		run(opt, "-Wa,--gsframe", "-c", "-o", m, many)
		so := filepath.Join(dir, "libmany"+opt+".so")
		run(opt, "-Wa,--gsframe", "-shared", "-fPIC", "-o", so, many)
		outs = append(outs, o, exe, m, so)
	}
	b := filepath.Join(dir, "big.o")
	run("-Wa,--gsframe", "-c", "-o", b, big)
	return append(outs, b)
}

// TestDumpLiveV1 builds SFrame v1 objects, executables (with a PLT) and
// shared libraries with the system gcc and binutils 2.40 and compares Dump
// with readelf --sframe=.sframe byte for byte.
func TestDumpLiveV1(t *testing.T) {
	readelfIs240(t)
	for _, path := range buildV1(t, t.TempDir()) {
		want, err := exec.Command("readelf", "--sframe=.sframe", path).Output()
		if err != nil {
			t.Fatalf("readelf %s: %v", path, err)
		}
		s := open(t, path, false)
		if s.Header.Version != 1 {
			t.Fatalf("%s: version %d", path, s.Header.Version)
		}
		got := dumpString(t, s, sframe.StyleAuto)
		if got != string(want) {
			t.Errorf("%s: dump differs from readelf:\n%s", filepath.Base(path), diffLines(string(want), got))
		}
		t.Logf("%s: %d FDEs, %d FREs, identical", filepath.Base(path), s.Header.NumFDEs, s.Header.NumFREs)
	}
}
