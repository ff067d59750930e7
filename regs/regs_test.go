package regs

import "testing"

func TestRegs(t *testing.T) {
	r := New(AMD64)
	if _, ok := r.PC(); ok {
		t.Fatal("empty set has a PC")
	}
	r.Set(AMD64RIP, 0x1000)
	r.Set(AMD64RSP, 0x2000)
	r.Set(MaxRegs, 1) // ignored
	r.Set(-1, 1)      // ignored
	if pc, ok := r.PC(); !ok || pc != 0x1000 {
		t.Errorf("PC = %#x %v", pc, ok)
	}
	if sp, ok := r.SP(); !ok || sp != 0x2000 {
		t.Errorf("SP = %#x %v", sp, ok)
	}
	r.Clear(AMD64RSP)
	if r.Has(AMD64RSP) || !r.Has(AMD64RIP) {
		t.Error("Clear")
	}
	r.Set(AMD64RBX, 3)
	r.KeepOnly(1 << AMD64RIP)
	if r.Has(AMD64RBX) || !r.Has(AMD64RIP) {
		t.Error("KeepOnly")
	}
	if s := r.String(); s != "amd64{rip=0x1000}" {
		t.Errorf("String = %q", s)
	}
	for _, c := range []struct {
		a          Arch
		pc, sp, fp int
		ra         int
		name       string
	}{{AMD64, 16, 7, 6, 16, "rbp"}, {ARM64, 32, 31, 29, 30, "fp"}} {
		if c.a.PC() != c.pc || c.a.SP() != c.sp || c.a.FP() != c.fp || c.a.RA() != c.ra || c.a.RegName(c.fp) != c.name {
			t.Errorf("%v roles wrong", c.a)
		}
		if !c.a.CalleeSaved(c.fp) || c.a.CalleeSaved(0) {
			t.Errorf("%v callee-saved wrong", c.a)
		}
	}
}
