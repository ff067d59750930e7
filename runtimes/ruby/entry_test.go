package ruby

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestEntryRange: in a library shaped as Debian's 3.3 libruby (a hidden
// vm_exec that rb_iseq_eval and rb_iseq_eval_main both end in), the
// entry's range is found, and is that of its symbol in the full table;
// Debian's 3.1 libruby, which names rb_vm_exec, gives none or that.
func TestEntryRange(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skipf("no gcc: %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "vm.c")
	code := `#include <stdio.h>
__attribute__((noinline)) static long vm_exec(long *ec) { long r = 0; for (long i = 0; i < ec[0]; i++) r += printf("%ld", ec[i]); return r; }
long other(long x) { return x * 3; }
long rb_iseq_eval(long *iseq) { iseq[1] = other(iseq[2]); return vm_exec(iseq); }
long rb_iseq_eval_main(long *iseq) { iseq[3] = other(iseq[4]) + 1; return vm_exec(iseq); }
`
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(dir, "libruby-3.3.so")
	if out, err := exec.Command("gcc", "-O2", "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	f, err := elf.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	full := symbols(f, "vm_exec")["vm_exec"]
	lo, hi, ok := entryRange(f, symbols(f, "rb_iseq_eval", "rb_iseq_eval_main"))
	if !ok || lo != full.Value || hi != full.Value+full.Size {
		t.Errorf("entryRange = %#x-%#x, %v; want vm_exec's %#x-%#x", lo, hi, ok, full.Value, full.Value+full.Size)
	}
	const deb = "/usr/lib/x86_64-linux-gnu/libruby-3.1.so.3.1.2"
	if f, err := elf.Open(deb); err == nil {
		defer f.Close()
		syms := symbols(f, "rb_iseq_eval", "rb_iseq_eval_main", Entry)
		if lo, hi, ok := entryRange(f, syms); ok && (lo != syms[Entry].Value || hi != lo+syms[Entry].Size) {
			t.Errorf("%s: entryRange = %#x-%#x, not rb_vm_exec's", deb, lo, hi)
		}
	}
}
