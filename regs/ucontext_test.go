package regs

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// ucontextProbe prints, with glibc's own headers, the offset of every
// field the ucontext_t layout of this package names: each register's
// gregs slot with the register's DWARF number (the x86-64 psABI's).
const ucontextProbe = `#define _GNU_SOURCE
#include <stddef.h>
#include <stdio.h>
#include <ucontext.h>
#define G(dwarf, r) printf("%d %zu\n", dwarf, offsetof(ucontext_t, uc_mcontext.gregs[r]))
int main(void) {
	G(0, REG_RAX); G(1, REG_RDX); G(2, REG_RCX); G(3, REG_RBX);
	G(4, REG_RSI); G(5, REG_RDI); G(6, REG_RBP); G(7, REG_RSP);
	G(8, REG_R8); G(9, REG_R9); G(10, REG_R10); G(11, REG_R11);
	G(12, REG_R12); G(13, REG_R13); G(14, REG_R14); G(15, REG_R15);
	G(16, REG_RIP);
	printf("fpregs %zu\n", offsetof(ucontext_t, uc_mcontext.fpregs));
	printf("fpregs_mem %zu\n", offsetof(ucontext_t, __fpregs_mem));
	return 0;
}
`

// TestAMD64UContext checks the layout against glibc's sys/ucontext.h,
// compiled here: the gregs slot of every register AMD64Gregs lists, and the
// offsets of fpregs and __fpregs_mem.
func TestAMD64UContext(t *testing.T) {
	if runtime.GOARCH != "amd64" || runtime.GOOS != "linux" {
		t.Skipf("needs x86-64 Linux's headers (this is %s/%s)", runtime.GOOS, runtime.GOARCH)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "probe.c")
	if err := os.WriteFile(src, []byte(ucontextProbe), 0o600); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "probe")
	if out, err := exec.Command("cc", "-o", exe, src).CombinedOutput(); err != nil {
		t.Skipf("no C compiler for the probe: %v\n%s", err, out)
	}
	out, err := exec.Command(exe).Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(AMD64Gregs)+2 {
		t.Fatalf("probe printed %q", out)
	}
	for _, line := range lines[:len(AMD64Gregs)] {
		f := strings.Fields(line)
		n, _ := strconv.Atoi(f[0])
		want, _ := strconv.ParseUint(f[1], 10, 64)
		if got, ok := AMD64UContextOffset(n); !ok || got != want {
			t.Errorf("AMD64UContextOffset(%s) = %d %v, glibc's is %d", AMD64.RegName(n), got, ok, want)
		}
	}
	for i, c := range []struct {
		name string
		got  uint64
	}{{"fpregs", AMD64UContextFPRegs}, {"fpregs_mem", AMD64UContextFPRegsMem}} {
		if line := lines[len(AMD64Gregs)+i]; line != c.name+" "+strconv.FormatUint(c.got, 10) {
			t.Errorf("glibc: %q, this package: %s %d", line, c.name, c.got)
		}
	}
	if _, ok := AMD64UContextOffset(MaxRegs); ok {
		t.Error("an offset for a register gregs does not hold")
	}
}
