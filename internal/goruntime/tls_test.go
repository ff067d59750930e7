package goruntime

import (
	"debug/elf"
	"os/exec"
	"runtime"
	"testing"
)

// TestTLSG: an amd64 Go program keeps its g at -8 from the fs base
// (runtime.tlsg, the slot get_tls reads), whether linked internally as an
// executable or a PIE, stripped, or externally (cgo): ReadOffsets finds it
// from runtime.morestack's code, or from the TLS segment.
func TestTLSG(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the g is in TLS on amd64 (arm64 keeps it in x28)")
	}
	builds := [][]string{nil, {"-buildmode=pie"}, {"-ldflags=-s -w"}}
	if _, err := exec.LookPath("gcc"); err == nil {
		builds = append(builds, []string{"-ldflags=-linkmode=external"})
	}
	for _, flags := range builds {
		exe := build(t, flags...)
		l, err := OpenOffsets(exe)
		if err != nil {
			t.Errorf("%v: %v", flags, err)
			continue
		}
		if !l.HasTLSG || l.TLSG != -8 {
			t.Errorf("%v: TLSG %d (found %v), want -8", flags, l.TLSG, l.HasTLSG)
		}
		if l.G.SchedLR != l.G.SchedBP-8 || l.M.G0 != 0 {
			t.Errorf("%v: g.sched.lr at %d (bp at %d), m.g0 at %d", flags, l.G.SchedLR, l.G.SchedBP, l.M.G0)
		}
	}
}

// TestDecodeTLSLoad decodes the loads of g morestack begins with.
func TestDecodeTLSLoad(t *testing.T) {
	for _, tc := range []struct {
		code []byte
		off  int64
		ok   bool
	}{
		// MOVQ %fs:0xfffffffffffffff8, %rdi (local exec).
		{[]byte{0x64, 0x48, 0x8b, 0x3c, 0x25, 0xf8, 0xff, 0xff, 0xff}, -8, true},
		// MOVQ $-16, %rcx; MOVQ %fs:(%rcx), %rdi (internally linked PIE).
		{[]byte{0x48, 0xc7, 0xc1, 0xf0, 0xff, 0xff, 0xff, 0x64, 0x48, 0x8b, 0x39}, -16, true},
		// MOVQ runtime.tlsg@GOTTPOFF(%rip), %rcx (initial exec): no offset in the code.
		{[]byte{0x48, 0x8b, 0x0d, 0x00, 0x10, 0x00, 0x00, 0x64, 0x48, 0x8b, 0x39}, 0, false},
		{[]byte{0x64, 0x48}, 0, false},
	} {
		off, ok := decodeTLSLoad(tc.code)
		if off != tc.off || ok != tc.ok {
			t.Errorf("% x: %d, %v; want %d, %v", tc.code, off, ok, tc.off, tc.ok)
		}
	}
}

// TestSwitchOf: the table names each runtime function once, with or
// without ".abi0".
func TestSwitchOf(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Switches {
		if seen[s.Name] || s.Kind == NoSwitch {
			t.Errorf("%s: listed twice or without a kind", s.Name)
		}
		seen[s.Name] = true
		for _, n := range s.Names() {
			if SwitchOf(n) != s.Kind {
				t.Errorf("SwitchOf(%q) = %d, want %d", n, SwitchOf(n), s.Kind)
			}
		}
	}
	if SwitchOf("runtime.morestack_noctxt") != NoSwitch || SwitchOf(".abi0") != NoSwitch {
		t.Error("SwitchOf names functions not in the table")
	}
}

// TestCodeAgrees: the release's table agrees with the stores the
// program's morestack makes, and a table wrong in any of the offsets they
// show is refuted (ReadOffsets then reads the DWARF).
func TestCodeAgrees(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("morestack's stores are decoded on amd64")
	}
	ef, err := elf.Open(build(t))
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	syms := symbols(ef)
	full, err := readELF(t, ef)
	if err != nil {
		t.Fatal(err)
	}
	if !codeAgrees(ef, syms, &full.G) {
		t.Errorf("the DWARF's offsets %+v disagree with morestack", full.G)
	}
	for _, bad := range []func(g *GOffsets){
		func(g *GOffsets) { g.M += 8 }, func(g *GOffsets) { g.SchedPC += 8 },
		func(g *GOffsets) { g.SchedSP += 8 }, func(g *GOffsets) { g.SchedBP += 8 },
	} {
		g := full.G
		bad(&g)
		if codeAgrees(ef, syms, &g) {
			t.Errorf("offsets %+v agree with morestack", g)
		}
	}
}

// readELF is Read of an opened file's DWARF layout.
func readELF(t *testing.T, ef *elf.File) (*Layout, error) {
	t.Helper()
	d, err := ef.DWARF()
	if err != nil {
		return nil, err
	}
	l := &Layout{}
	return l, l.fromDWARF(d)
}
