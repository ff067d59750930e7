package clitest

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/sframe"
)

// genProgram calls back and forth between itself and libc (qsort with a
// comparison function, printf) and exits: the generated files must still
// run and print the same.
const genProgram = `#include <stdio.h>
#include <stdlib.h>
static int cmp(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }
__attribute__((noinline)) int sum(int *v, int n) { int s = 0; for (int i = 0; i < n; i++) s += v[i] * (i + 1); return s; }
int main(void) {
	int v[] = {5, 3, 9, 1, 7, 2};
	qsort(v, 6, sizeof v[0], cmp);
	printf("sorted %d %d %d, weighted %d\n", v[0], v[3], v[5], sum(v, 6));
	return 0;
}
`

func buildGenPrograms(t *testing.T, dir string) []string {
	t.Helper()
	src := filepath.Join(dir, "prog.c")
	if err := os.WriteFile(src, []byte(genProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, v := range []struct{ name, flag string }{{"pie", "-pie"}, {"nopie", "-no-pie"}, {"static", "-static"}} {
		exe := filepath.Join(dir, "prog-"+v.name)
		if b, err := exec.Command("gcc", "-O2", v.flag, "-o", exe, src).CombinedOutput(); err != nil {
			t.Fatalf("gcc: %v\n%s", err, b)
		}
		out = append(out, exe)
	}
	return out
}

func runProgram(t *testing.T, env []string, exe string) string {
	t.Helper()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", exe, err, out)
	}
	return string(out)
}

// readelfClean runs the installed readelf and fails on any message on
// stderr (readelf warns rather than failing on most problems).
func readelfClean(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("readelf", args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil || e.Len() > 0 {
		t.Errorf("readelf %s: %v\n%s", strings.Join(args, " "), err, e.String())
	}
	return o.String()
}

// TestSFrameGen: rewind sframe gen on PIE, non-PIE and static programs, in
// every version. The outputs run and print what the originals print, the
// installed readelf (binutils 2.40) reads their headers and segments
// without a complaint and shows a GNU_SFRAME segment, and for version 1
// (the only one readelf 2.40 decodes) readelf --sframe prints exactly
// what rewind sframe dump prints. --separate gives the same bytes as the
// section in the file when told its address.
func TestSFrameGen(t *testing.T) {
	dir := t.TempDir()
	for _, exe := range buildGenPrograms(t, dir) {
		want := runProgram(t, nil, exe)
		for _, v := range []string{"1", "2", "3"} {
			out := exe + ".v" + v
			stdout, stderr, code := run(t, "sframe", "gen", exe, "-o", out, "--version", v)
			if code != 0 {
				t.Fatalf("gen %s v%s: exit %d: %s", filepath.Base(exe), v, code, stderr)
			}
			if !strings.Contains(stdout, "SFrame v"+v+" (amd64)") || !strings.Contains(stdout, ".eh_frame + .eh_frame_hdr:") {
				t.Errorf("summary: %q", stdout)
			}
			if strings.Contains(stdout, "note:") {
				t.Errorf("%s: section not loaded: %s", filepath.Base(exe), stdout)
			}
			if got := runProgram(t, nil, out); got != want {
				t.Errorf("%s v%s prints %q, the original %q", filepath.Base(out), v, got, want)
			}
			hdrs := readelfClean(t, "-lSW", out)
			if !strings.Contains(hdrs, "GNU_SFRAME") || !strings.Contains(hdrs, " .sframe ") {
				t.Errorf("readelf -lSW %s: no GNU_SFRAME segment or .sframe section:\n%s", out, hdrs)
			}
			dump, stderr, code := run(t, "sframe", "dump", out)
			if code != 0 {
				t.Fatalf("sframe dump %s: %s", out, stderr)
			}
			if v == "1" {
				if ref := readelfClean(t, "--sframe", out); ref != dump {
					t.Errorf("%s: readelf --sframe and rewind sframe dump differ:\n%s\n----\n%s", out, ref, dump)
				}
			}
			f, err := elf.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			sec := f.Section(".sframe")
			inFile, _ := sec.Data()
			if _, err := sframe.FromELF(f, out, "", false); err != nil {
				t.Errorf("the reader rejects %s: %v", out, err)
			}
			f.Close()
			// elfobj, which the unwinder's SFrame stepper reads sections
			// through, finds the section too.
			if ef, err := elfobj.Open(out); err != nil || ef.SFrame == nil || ef.SFrame.Addr != sec.Addr {
				t.Errorf("elfobj does not find .sframe in %s: %v", out, err)
			} else {
				ef.Close()
			}
			sep := out + ".sframe"
			if _, stderr, code := run(t, "sframe", "gen", "-q", exe, "-o", sep, "--version", v, "--separate",
				"--addr", fmt.Sprint(sec.Addr)); code != 0 {
				t.Fatalf("gen --separate: %s", stderr)
			}
			if b, _ := os.ReadFile(sep); !bytes.Equal(b, inFile) {
				t.Errorf("%s: --separate --addr %#x differs from the section in the file", filepath.Base(out), sec.Addr)
			}
		}
	}
}

// TestSFrameGenLibc: libc with a generated section (version 2) replaces the
// system's for a program, which still runs; the functions gas would skip
// are reported on stderr with a reason.
func TestSFrameGenLibc(t *testing.T) {
	dir := t.TempDir()
	exe := buildGenPrograms(t, dir)[0]
	lib := filepath.Join(dir, "lib")
	os.Mkdir(lib, 0o755)
	stdout, stderr, code := run(t, "sframe", "gen", "/lib/x86_64-linux-gnu/libc.so.6", "-o", filepath.Join(lib, "libc.so.6"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	t.Logf("%s%s", stdout, stderr)
	if !strings.Contains(stderr, "skipping SFrame FDE for") || !strings.Contains(stderr, "(.cfi_register)") {
		t.Errorf("no skipped function reported:\n%s", stderr)
	}
	readelfClean(t, "-lSW", filepath.Join(lib, "libc.so.6"))
	want := runProgram(t, nil, exe)
	ldd, err := exec.Command("ldd", exe).CombinedOutput()
	if err == nil {
		cmd := exec.Command("ldd", exe)
		cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
		ldd, _ = cmd.CombinedOutput()
		if !strings.Contains(string(ldd), lib+"/libc.so.6") {
			t.Fatalf("the generated libc is not the one loaded:\n%s", ldd)
		}
	}
	if got := runProgram(t, []string{"LD_LIBRARY_PATH=" + lib}, exe); got != want {
		t.Errorf("with the generated libc: %q, want %q", got, want)
	}
}

// TestSFrameGenErrors: clear errors, no output file, for what cannot be
// done.
func TestSFrameGenErrors(t *testing.T) {
	dir := t.TempDir()
	exe := buildGenPrograms(t, dir)[0]
	withSFrame := exe + ".sf"
	if _, stderr, code := run(t, "sframe", "gen", exe, "-o", withSFrame); code != 0 {
		t.Fatal(stderr)
	}
	text := filepath.Join(dir, "text")
	os.WriteFile(text, []byte("not an ELF file\n"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"sframe", "gen", withSFrame, "-o", withSFrame + "2"}, "already present"},
		{[]string{"sframe", "gen", exe}, "-o OUT"},
		{[]string{"sframe", "gen", text, "-o", text + "2"}, text},
		{[]string{"sframe", "gen", exe, "-o", exe + "2", "--version", "4"}, "unsupported --version"},
		{[]string{"sframe", "gen", exe, "-o", exe + "2", "--addr", "4096"}, "--separate"},
		{[]string{"sframe"}, "rewind sframe gen IN -o OUT"},
	} {
		_, stderr, code := run(t, c.args...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("rewind %s: exit %d, stderr %q; want an error mentioning %q", strings.Join(c.args, " "), code, stderr, c.want)
		}
		if o := c.args[len(c.args)-1]; strings.HasSuffix(o, "2") {
			if _, err := os.Stat(o); err == nil {
				t.Errorf("rewind %s wrote %s", strings.Join(c.args, " "), o)
			}
		}
	}
}

// TestSFrameGenUnloaded: when no segment can be added (here a 100 MiB
// .bss would need that much padding), the section is added unloaded, at
// address 0, with a note; it still reads back with the right function
// addresses, and the program still runs.
func TestSFrameGenUnloaded(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "bss.c")
	os.WriteFile(src, []byte("char big[100<<20];\n__attribute__((noinline)) int f(int i) { return big[i]; }\nint main(void) { return f(12345); }\n"), 0o644)
	exe := filepath.Join(dir, "bss")
	if out, err := exec.Command("gcc", "-O2", "-o", exe, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	out := exe + ".sf"
	stdout, stderr, code := run(t, "sframe", "gen", exe, "-o", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "note: .sframe added but not loaded") || !strings.Contains(stdout, "padding") {
		t.Errorf("no note about the unloaded section: %q", stdout)
	}
	runProgram(t, nil, out)
	hdrs := readelfClean(t, "-lSW", out)
	if strings.Contains(hdrs, "GNU_SFRAME") {
		t.Errorf("a GNU_SFRAME segment for an unloaded section:\n%s", hdrs)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sec, err := sframe.FromELF(f, out, "", false)
	if err != nil {
		t.Fatal(err)
	}
	syms, _ := f.Symbols()
	found := false
	for _, s := range syms {
		if s.Name == "f" && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			found = true
			if i := sec.FindFDE(s.Value); i < 0 || sec.FDE(i).Start != s.Value {
				t.Errorf("no FDE starts at f (%#x)", s.Value)
			}
		}
	}
	if !found {
		t.Fatal("no symbol f")
	}
}
