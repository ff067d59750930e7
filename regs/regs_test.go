package regs

import (
	"encoding/binary"
	"math/bits"
	"testing"
)

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

// TestFromUser checks the user_regs_struct slot of every amd64 register
// against the kernel's order (arch/x86/include/asm/user_64.h) and the
// arm64 layout.
func TestFromUser(t *testing.T) {
	w := make([]uint64, UserRegsWords(AMD64))
	for i := range w {
		w[i] = uint64(i) + 100
	}
	r, err := FromUser(AMD64, w)
	if err != nil {
		t.Fatal(err)
	}
	// slot of each DWARF register: rax 10, rdx 12, rcx 11, rbx 5, rsi 13,
	// rdi 14, rbp 4, rsp 19, r8 9 ... r15 0, rip 16.
	want := []int{10, 12, 11, 5, 13, 14, 4, 19, 9, 8, 7, 6, 3, 2, 1, 0, 16}
	for dw, slot := range want {
		if v, ok := r.Get(dw); !ok || v != uint64(slot)+100 {
			t.Errorf("DWARF %d = %d, %v; want slot %d", dw, v, ok, slot)
		}
	}
	if _, err := FromUser(AMD64, w[:20]); err == nil {
		t.Error("short amd64 set accepted")
	}
	a := make([]uint64, UserRegsWords(ARM64))
	for i := range a {
		a[i] = uint64(i) * 3
	}
	r, err = FromUser(ARM64, a)
	if err != nil {
		t.Fatal(err)
	}
	if pc, _ := r.PC(); pc != 32*3 {
		t.Errorf("arm64 pc %d", pc)
	}
	if sp, _ := r.SP(); sp != 31*3 {
		t.Errorf("arm64 sp %d", sp)
	}
	if _, err := FromUser(Unknown, a); err == nil {
		t.Error("unknown arch accepted")
	}
}

// TestFromPerf checks perf's amd64 register order
// (arch/x86/include/uapi/asm/perf_regs.h: ax bx cx dx si di bp sp ip
// flags cs ss ds es fs gs r8..r15) and arm64's (DWARF order).
func TestFromPerf(t *testing.T) {
	mask := PerfUserMask(AMD64)
	vals := make([]uint64, 17)
	for i := range vals {
		vals[i] = uint64(i) + 1
	}
	r, ok := FromPerf(AMD64, mask, vals)
	if !ok {
		t.Fatal("no registers")
	}
	// value k+1 is the k-th set bit: ax bx cx dx si di bp sp ip r8..r15.
	want := map[int]uint64{AMD64RAX: 1, AMD64RBX: 2, AMD64RCX: 3, AMD64RDX: 4, AMD64RSI: 5, AMD64RDI: 6,
		AMD64RBP: 7, AMD64RSP: 8, AMD64RIP: 9, 8: 10, 15: 17}
	for n, v := range want {
		if got, _ := r.Get(n); got != v {
			t.Errorf("DWARF %d = %d, want %d", n, got, v)
		}
	}
	if _, ok := FromPerf(AMD64, mask, vals[:5]); ok {
		t.Error("a value count that does not match the mask was accepted")
	}
	raw := make([]byte, 8*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint64(raw[8*i:], v)
	}
	if rr, ok := FromPerfRaw(AMD64, mask, raw); !ok || rr != r {
		t.Errorf("FromPerfRaw: %v %v, want FromPerf's %v", rr, ok, r)
	}
	if _, ok := FromPerfRaw(AMD64, mask, raw[:40]); ok {
		t.Error("FromPerfRaw: a byte count that does not match the mask was accepted")
	}
	a := make([]uint64, 33)
	for i := range a {
		a[i] = uint64(i)
	}
	if r, ok := FromPerf(ARM64, PerfUserMask(ARM64), a); !ok {
		t.Error("arm64: no registers")
	} else if pc, _ := r.PC(); pc != 32 {
		t.Errorf("arm64 pc %d", pc)
	}
}

// TestPCSPFromPerfRaw checks the shortcut against FromPerfRaw on both
// architectures, with masks that leave registers out.
func TestPCSPFromPerfRaw(t *testing.T) {
	for _, c := range []struct {
		arch Arch
		mask uint64
	}{
		{AMD64, PerfUserMask(AMD64)}, {AMD64, 1<<7 | 1<<8}, {AMD64, 1<<6 | 1<<8 | 1<<20}, {AMD64, 1<<7 | 1<<8 | 1<<23},
		{ARM64, PerfUserMask(ARM64)}, {ARM64, 1<<29 | 1<<31 | 1<<32}, {ARM64, 1 << 31},
	} {
		n := bits.OnesCount64(c.mask)
		raw := make([]byte, 8*n)
		for i := range n {
			binary.LittleEndian.PutUint64(raw[8*i:], uint64(100+i))
		}
		r, ok := FromPerfRaw(c.arch, c.mask, raw)
		pc, sp, ok2 := PCSPFromPerfRaw(c.arch, c.mask, raw)
		wpc, _ := r.PC()
		wsp, _ := r.SP()
		if ok != ok2 || ok && (pc != wpc || sp != wsp) {
			t.Errorf("%v mask %#x: %#x %#x %v, FromPerfRaw %#x %#x %v", c.arch, c.mask, pc, sp, ok2, wpc, wsp, ok)
		}
		if _, _, ok := PCSPFromPerfRaw(c.arch, c.mask, raw[:len(raw)-8]); ok {
			t.Errorf("%v mask %#x: a short record was accepted", c.arch, c.mask)
		}
	}
}
