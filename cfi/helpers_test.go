package cfi

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const libcPath = "/usr/lib/x86_64-linux-gnu/libc.so.6"

// elfSection loads section name of the ELF file at path as a CFI Section.
// It reports ok=false if the file has no such section.
func elfSection(t testing.TB, path, name string) (*Section, bool) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer f.Close()
	s := f.Section(name)
	if s == nil {
		return nil, false
	}
	data, err := s.Data()
	if err != nil {
		t.Fatalf("%s %s: %v", path, name, err)
	}
	sec := &Section{
		Name:      path + " " + name,
		Data:      data,
		Addr:      s.Addr,
		ByteOrder: f.ByteOrder,
		PtrSize:   8,
	}
	if f.Class == elf.ELFCLASS32 {
		sec.PtrSize = 4
	}
	if name == ".debug_frame" {
		sec.Kind = DebugFrame
	}
	if txt := f.Section(".text"); txt != nil {
		sec.TextAddr = txt.Addr
	}
	if got := f.Section(".got"); got != nil {
		sec.DataAddr = got.Addr
	}
	return sec, true
}

func mustSection(t testing.TB, path, name string) *Section {
	t.Helper()
	s, ok := elfSection(t, path, name)
	if !ok {
		t.Fatalf("%s has no %s section", path, name)
	}
	return s
}

// needTool skips the test if a command is missing.
func needTool(t testing.TB, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s not installed", name)
	}
}

// run runs a command and fails the test if it fails.
func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// testProgram is a small C program whose functions exercise the common CFI
// shapes: plain prologues, shrink-wrapped early returns
// (remember/restore_state), alloca (frame pointer), stack realignment
// (DRAP: CFA expression), cleanups with -fexceptions (LSDA, personality),
// and PLT calls (the PLT's CFA expression).
const testProgram = `
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <alloca.h>
static void cleanup_buf(char **p) { free(*p); }
__attribute__((noinline)) int with_cleanup(int n) {
	char *p __attribute__((cleanup(cleanup_buf))) = malloc(n);
	memset(p, 1, n);
	printf("%d\n", p[n/2]);
	return p[0];
}
__attribute__((noinline)) int uses_alloca(int n) {
	char *p = alloca(n);
	memset(p, 0, n);
	return printf("%s", p);
}
__attribute__((noinline, force_align_arg_pointer)) int realign(int n) {
	double v[4] __attribute__((aligned(32)));
	for (int i = 0; i < 4; i++) v[i] = n * i;
	return printf("%f\n", v[n & 3]);
}
__attribute__((noinline)) int shrink(int n, int *a) {
	if (n < 0) return 0;
	int s = 0;
	for (int i = 0; i < n; i++) s += printf("%d", a[i]) * a[i];
	return s;
}
__attribute__((noinline)) long many(long a, long b, long c, long d, long e, long f, long g) {
	long r = 0;
	for (long i = 0; i < a; i++) r += printf("%ld %ld %ld %ld %ld %ld\n", b, c, d, e, f, g + i);
	return r;
}
int main(int argc, char **argv) {
	int a[3] = {1, 2, 3};
	return with_cleanup(argc + 8) + uses_alloca(argc) + realign(argc) + shrink(argc, a) +
		(int)many(argc, 1, 2, 3, 4, 5, 6);
}
`

// buildC compiles testProgram with gcc and the given flags into dir and
// returns the output path.
func buildC(t testing.TB, dir, out string, flags ...string) string {
	t.Helper()
	needTool(t, "gcc")
	src := filepath.Join(dir, "p.c")
	if _, err := os.Stat(src); err != nil {
		if err := os.WriteFile(src, []byte(testProgram), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	exe := filepath.Join(dir, out)
	args := append(append([]string{}, flags...), "-o", exe, src)
	run(t, "gcc", args...)
	return exe
}

// asm is a builder for hand-made CFI bytes.
type asm struct {
	b     []byte
	order binary.AppendByteOrder
}

func newAsm() *asm { return &asm{order: binary.LittleEndian} }

func (a *asm) u8(v ...byte) *asm { a.b = append(a.b, v...); return a }
func (a *asm) u16(v uint16) *asm { a.b = a.order.AppendUint16(a.b, v); return a }
func (a *asm) u32(v uint32) *asm { a.b = a.order.AppendUint32(a.b, v); return a }
func (a *asm) u64(v uint64) *asm { a.b = a.order.AppendUint64(a.b, v); return a }
func (a *asm) str(s string) *asm { a.b = append(append(a.b, s...), 0); return a }
func (a *asm) uleb(v uint64) *asm {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			c |= 0x80
		}
		a.b = append(a.b, c)
		if v == 0 {
			return a
		}
	}
}
func (a *asm) sleb(v int64) *asm {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		done := (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0)
		if !done {
			c |= 0x80
		}
		a.b = append(a.b, c)
		if done {
			return a
		}
	}
}

// entry appends a CIE or FDE: the length (32- or 64-bit format), then
// body (which starts with the id / CIE pointer), padded with DW_CFA_nop to
// a multiple of align bytes. It returns the entry's offset.
func (a *asm) entry(is64 bool, align int, body []byte) int {
	off := len(a.b)
	hdr := 4
	if is64 {
		hdr = 12
	}
	n := len(body)
	for (hdr+n)%align != 0 {
		n++
	}
	if is64 {
		a.u32(0xffffffff).u64(uint64(n))
	} else {
		a.u32(uint32(n))
	}
	a.b = append(a.b, body...)
	for i := len(body); i < n; i++ {
		a.b = append(a.b, 0)
	}
	return off
}

// goBinary builds a small Go program (its .debug_frame is Go's linker's
// own CFI) and returns its path.
func goBinary(t testing.TB) (string, error) {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hi\") }\n"), 0o644); err != nil {
		return "", err
	}
	exe := filepath.Join(dir, "gobin")
	gotool := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.Command(gotool, "build", "-o", exe, src)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GO111MODULE=off", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return exe, nil
}

func eqRule(a, b Rule) bool {
	return a.Kind == b.Kind && a.Reg == b.Reg && a.Offset == b.Offset && string(a.Expr) == string(b.Expr)
}

func eqCFA(a, b CFARule) bool {
	return a.Kind == b.Kind && a.Reg == b.Reg && a.Offset == b.Offset && string(a.Expr) == string(b.Expr)
}
