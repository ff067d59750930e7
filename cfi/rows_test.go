package cfi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// kitchenSink builds an .eh_frame (at address 0) with one CIE (code
// alignment 4, data alignment -8) and one FDE for [0x1000, 0x1400) whose
// program uses every DW_CFA opcode.
func kitchenSink() []byte {
	a := newAsm()
	cie := a.entry(false, 8, newAsm().u32(0).u8(1).str("zR").uleb(4).sleb(-8).u8(16).uleb(1).u8(0x1b).u8(stdInitial...).b)
	fdeOff := len(a.b)
	insOff := fdeOff + 17 // length, CIE pointer, start, size, aug length
	ins := newAsm()
	ins.u8(0x41)              // advance_loc 1 (x4)
	ins.u8(0x0e, 16)          // def_cfa_offset 16
	ins.u8(0x86, 2)           // offset r6, 2 (x-8)
	ins.u8(0x02, 1)           // advance_loc1 1
	ins.u8(0x05, 3, 3)        // offset_extended r3, 3
	ins.u8(0x11, 12).sleb(-3) // offset_extended_sf r12, -3
	ins.u8(0x2f, 13, 2)       // GNU_negative_offset_extended r13, 2
	ins.u8(0x14, 14, 4)       // val_offset r14, 4
	ins.u8(0x15, 15).sleb(-2) // val_offset_sf r15, -2
	ins.u8(0x03).u16(2)       // advance_loc2 2
	ins.u8(0x09, 1, 2)        // register r1 in r2
	ins.u8(0x07, 0)           // undefined r0
	ins.u8(0x08, 3)           // same_value r3
	ins.u8(0x2e, 32)          // GNU_args_size 32
	ins.u8(0x0a)              // remember_state
	ins.u8(0x0c, 6, 16)       // def_cfa r6, 16
	ins.u8(0x04).u32(3)       // advance_loc4 3
	ins.u8(0x0d, 7)           // def_cfa_register r7
	ins.u8(0x12, 6).sleb(-2)  // def_cfa_sf r6, -2
	ins.u8(0x13).sleb(-4)     // def_cfa_offset_sf -4
	ins.u8(0x1d).u64(1)       // MIPS_advance_loc8 1
	ins.u8(0x0b)              // restore_state
	ins.u8(0xc6)              // restore r6
	ins.u8(0x07, 16)          // undefined r16
	ins.u8(0x06, 16)          // restore_extended r16
	ins.u8(0x01)              // set_loc (pcrel sdata4) 0x1040
	ins.u32(uint32(0x1040 - (insOff + len(ins.b))))
	ins.u8(0x0f, 2, 0x77, 0x08)       // def_cfa_expression breg7 8
	ins.u8(0x10, 3, 2, 0x76, 0x70)    // expression r3: breg6 -16
	ins.u8(0x16, 12, 2, 0x77, 0x10)   // val_expression r12: breg7 16
	ins.u8(0x2d)                      // AARCH64_negate_ra_state / GNU_window_save
	ins.u8(0xa8, 1)                   // offset r40 (dropped)
	ins.u8(0x05, 100, 1)              // offset_extended r100 (dropped)
	ins.u8(0x10, 0x80, 0x01, 1, 0x96) // expression r128 (dropped)
	ins.u8(0x00)                      // nop
	ins.u8(0x42)                      // advance_loc 2
	ins.u8(0x0c, 7, 8)                // def_cfa r7, 8
	body := newAsm().u32(uint32(fdeOff + 4 - cie)).u32(uint32(0x1000 - (fdeOff + 8))).u32(0x400).uleb(0).u8(ins.b...)
	a.entry(false, 8, body.b)
	a.u32(0)
	return a.b
}

// rowSpec describes an expected row: the CFA as text and the rules of the
// registers that have one, e.g. "r6=c-16".
type rowSpec struct {
	start, end uint64
	cfa        string
	regs       string
	argsSize   uint64
	raSigned   bool
}

func (s rowSpec) check(r *Row) error {
	var p []string
	if r.Start != s.start || r.End != s.end {
		p = append(p, fmt.Sprintf("range [%#x,%#x), want [%#x,%#x)", r.Start, r.End, s.start, s.end))
	}
	if got := fmtCFA(r.CFA); got != s.cfa {
		p = append(p, fmt.Sprintf("CFA %s, want %s", got, s.cfa))
	}
	if got := fmtRegs(r); got != s.regs {
		p = append(p, fmt.Sprintf("regs %q, want %q", got, s.regs))
	}
	if r.ArgsSize != s.argsSize || r.RASigned != s.raSigned {
		p = append(p, fmt.Sprintf("args_size %d ra_signed %v, want %d %v", r.ArgsSize, r.RASigned, s.argsSize, s.raSigned))
	}
	if p != nil {
		return errors.New(strings.Join(p, "; "))
	}
	return nil
}

func fmtCFA(c CFARule) string {
	if c.Kind == CFAExpression {
		return fmt.Sprintf("exp%x", c.Expr)
	}
	return fmt.Sprintf("r%d%+d", c.Reg, c.Offset)
}

func fmtRegs(r *Row) string {
	var s []string
	for n, rule := range r.Regs {
		var v string
		switch rule.Kind {
		case RuleSameValue:
			continue
		case RuleUndefined:
			v = "u"
		case RuleOffset:
			v = fmt.Sprintf("c%+d", rule.Offset)
		case RuleValOffset:
			v = fmt.Sprintf("v%+d", rule.Offset)
		case RuleRegister:
			v = fmt.Sprintf("r%d", rule.Reg)
		case RuleExpression:
			v = fmt.Sprintf("exp%x", rule.Expr)
		case RuleValExpression:
			v = fmt.Sprintf("vexp%x", rule.Expr)
		}
		s = append(s, fmt.Sprintf("r%d=%s", n, v))
	}
	return strings.Join(s, " ")
}

var kitchenSinkRows = []rowSpec{
	{0x1000, 0x1004, "r7+8", "r16=c-8", 0, false},
	{0x1004, 0x1008, "r7+16", "r6=c-16 r16=c-8", 0, false},
	{0x1008, 0x1010, "r7+16", "r3=c-24 r6=c-16 r12=c+24 r13=c+16 r14=v-32 r15=v+16 r16=c-8", 0, false},
	{0x1010, 0x101c, "r6+16", "r0=u r1=r2 r6=c-16 r12=c+24 r13=c+16 r14=v-32 r15=v+16 r16=c-8", 32, false},
	{0x101c, 0x1020, "r6+32", "r0=u r1=r2 r6=c-16 r12=c+24 r13=c+16 r14=v-32 r15=v+16 r16=c-8", 32, false},
	{0x1020, 0x1040, "r7+16", "r0=u r1=r2 r12=c+24 r13=c+16 r14=v-32 r15=v+16 r16=c-8", 32, false},
	{0x1040, 0x1048, "exp7708", "r0=u r1=r2 r3=exp7670 r12=vexp7710 r13=c+16 r14=v-32 r15=v+16 r16=c-8", 32, true},
	{0x1048, 0x1400, "r7+8", "r0=u r1=r2 r3=exp7670 r12=vexp7710 r13=c+16 r14=v-32 r15=v+16 r16=c-8", 32, true},
}

func TestEveryOpcode(t *testing.T) {
	fdes, err := Parse(ehSection(kitchenSink(), 0))
	if err != nil {
		t.Fatal(err)
	}
	if len(fdes) != 1 {
		t.Fatalf("%d FDEs", len(fdes))
	}
	f := fdes[0]
	rows := collectRows(t, f)
	if len(rows) != len(kitchenSinkRows) {
		for _, r := range rows {
			t.Logf("[%#x,%#x) %s %s", r.Start, r.End, fmtCFA(r.CFA), fmtRegs(&r))
		}
		t.Fatalf("%d rows, want %d", len(rows), len(kitchenSinkRows))
	}
	for i := range rows {
		if err := kitchenSinkRows[i].check(&rows[i]); err != nil {
			t.Errorf("row %d: %v", i, err)
		}
	}
	// RowAt agrees with Rows at every address.
	for pc := f.Start; pc < f.End; pc++ {
		r, err := f.RowAt(pc)
		if err != nil {
			t.Fatalf("RowAt(%#x): %v", pc, err)
		}
		var want *rowSpec
		for i := range kitchenSinkRows {
			if s := &kitchenSinkRows[i]; pc >= s.start && pc < s.end {
				want = s
			}
		}
		if err := want.check(&r); err != nil {
			t.Fatalf("RowAt(%#x): %v", pc, err)
		}
	}
	for _, pc := range []uint64{0, f.Start - 1, f.End, ^uint64(0)} {
		if _, err := f.RowAt(pc); err == nil {
			t.Errorf("RowAt(%#x) succeeded", pc)
		}
	}
	// fn's error stops Rows and comes back unchanged.
	stop := errors.New("enough")
	n := 0
	if err := f.Rows(func(*Row) error { n++; return stop }); err != stop || n != 1 {
		t.Errorf("Rows returned %v after %d rows", err, n)
	}
}

// TestReadelfSynthetic assembles hand-made sections (the every-opcode
// .eh_frame, and a .debug_frame in the 64-bit DWARF format with version 4
// and version 3 CIEs) and compares readelf's reading of them with ours.
func TestReadelfSynthetic(t *testing.T) {
	needTool(t, "gcc")
	dbg := newAsm()
	cie64 := dbg.entry(true, 8, newAsm().u64(^uint64(0)).u8(4).str("").u8(8, 0).uleb(1).sleb(-8).uleb(16).u8(stdInitial...).b)
	cie32 := dbg.entry(false, 4, newAsm().u32(0xffffffff).u8(3).str("").uleb(2).sleb(-4).uleb(16).u8(0x0c, 7, 4, 0x90, 1).b)
	dbg.entry(true, 8, newAsm().u64(uint64(cie64)).u64(0x2000).u64(0x100).
		u8(0x44, 0x0e, 16, 0x86, 2).u8(0x01).u64(0x2010).u8(0x0a, 0x0c, 6, 16, 0x41, 0x0b, 0xc6, 0x41, 0x12, 7, 0x7e).b)
	dbg.u32(0)
	dbg.entry(false, 4, newAsm().u32(uint32(cie32)).u64(0x3000).u64(0x40).u8(0x42, 0x13, 0x7e, 0x83, 3, 0x03).u16(4).u8(0x0d, 6).b)

	dir := t.TempDir()
	var src strings.Builder
	emit := func(name, flags string, b []byte) {
		fmt.Fprintf(&src, "\t.section %s,%s,@progbits\n", name, flags)
		for i := 0; i < len(b); i += 16 {
			var s []string
			for _, c := range b[i:min(i+16, len(b))] {
				s = append(s, fmt.Sprintf("%#x", c))
			}
			fmt.Fprintf(&src, "\t.byte %s\n", strings.Join(s, ","))
		}
	}
	emit(".eh_frame", `"a"`, kitchenSink())
	emit(".debug_frame", `""`, dbg.b)
	s := filepath.Join(dir, "cfi.s")
	if err := os.WriteFile(s, []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	obj := filepath.Join(dir, "cfi.o")
	run(t, "gcc", "-c", "-o", obj, s)
	re := readelfFrames(t, obj)
	for _, name := range []string{".eh_frame", ".debug_frame"} {
		sec := mustSection(t, obj, name)
		nf, nr := compareWithReadelf(t, sec, re[name])
		t.Logf("%s: %d FDEs, %d rows agree", name, nf, nr)
		if nf < 1 {
			t.Errorf("%s: no FDE compared", name)
		}
	}
}

// fdeWith builds an .eh_frame with the standard CIE and one FDE for
// [0x1000, 0x1100) with the given program, and parses it.
func fdeWith(t *testing.T, ins []byte) *FDE {
	t.Helper()
	a := newAsm()
	cie := a.ehCIE(0x03)
	a.entry(false, 4, newAsm().u32(uint32(len(a.b)+4-cie)).u32(0x1000).u32(0x100).uleb(0).u8(ins...).b)
	fdes, err := Parse(ehSection(a.b, 0))
	if err != nil || len(fdes) != 1 {
		t.Fatalf("Parse: %d FDEs, %v", len(fdes), err)
	}
	return fdes[0]
}

func TestRowsErrors(t *testing.T) {
	var deep []byte
	for i := 0; i <= maxRememberDepth; i++ {
		deep = append(deep, 0x0a)
	}
	// The FDE's instructions start at section offset 0x18+17 = 0x29.
	const insOff = 0x29
	for _, tc := range []struct {
		name string
		ins  []byte
		at   int // offset of the failing instruction in ins
		msg  string
	}{
		{"restore_state empty", []byte{0x0b}, 0, "DW_CFA_restore_state: no remembered state"},
		{"remember overflow", deep, maxRememberDepth, "more than 64 remembered states"},
		{"def_cfa_register after expression", []byte{0x0f, 1, 0x30, 0x0d, 6}, 3, "CFA is defined by an expression"},
		{"def_cfa_offset after expression", []byte{0x0f, 1, 0x30, 0x0e, 6}, 3, "CFA is defined by an expression"},
		{"def_cfa_offset_sf after expression", []byte{0x0f, 1, 0x30, 0x13, 6}, 3, "CFA is defined by an expression"},
		{"unknown 0x1c", []byte{0x00, 0x1c}, 1, "unknown call frame instruction 0x1c"},
		{"unknown 0x3f", []byte{0x3f}, 0, "unknown call frame instruction 0x3f"},
		{"truncated offset", []byte{0x86, 0x80, 0x80}, 0, "DW_CFA_offset: truncated operand"},
		{"truncated advance_loc4", []byte{0x04, 1, 0}, 0, "DW_CFA_advance_loc4: truncated"},
		{"truncated expression", []byte{0x10, 3, 9, 0x30}, 0, "DW_CFA_expression: truncated"},
		{"truncated def_cfa_expression", []byte{0x0f, 0x80, 0x80}, 0, "DW_CFA_def_cfa_expression: truncated"},
		{"truncated set_loc", []byte{0x01, 0x00, 0x10}, 0, "DW_CFA_set_loc: truncated pointer"},
		{"set_loc backwards", []byte{0x41, 0x01, 0x00, 0x10, 0, 0}, 1, "before current location"},
		{"huge cfa register", []byte{0x0c, 0x80, 0x80, 0x04, 0}, 0, "register number 65536 too large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fdeWith(t, tc.ins)
			err := f.Rows(func(*Row) error { return nil })
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v", err)
			}
			if fe.Offset != uint64(insOff+tc.at) || !strings.Contains(fe.Msg, tc.msg) || fe.Section != "test .eh_frame" {
				t.Errorf("err = %v, want offset %#x and %q", err, insOff+tc.at, tc.msg)
			}
			if _, err := f.RowAt(0x10ff); err == nil {
				t.Errorf("RowAt succeeded")
			}
		})
	}

	// A CIE that never defines the CFA.
	a := newAsm()
	cie := a.entry(false, 4, newAsm().u32(0).u8(1).str("zR").uleb(1).sleb(-8).u8(16).uleb(1).u8(0x03).b)
	a.entry(false, 4, newAsm().u32(uint32(len(a.b)+4-cie)).u32(0x1000).u32(0x100).uleb(0).b)
	fdes, err := Parse(ehSection(a.b, 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := fdes[0].Rows(func(*Row) error { return nil }); err == nil || !strings.Contains(err.Error(), "no CFA rule") {
		t.Errorf("err = %v", err)
	}
	// A hand-built FDE with no CIE.
	if err := (&FDE{Start: 1, End: 2}).Rows(func(*Row) error { return nil }); err == nil {
		t.Errorf("FDE without CIE: no error")
	}
}

func TestRowsEdgeCases(t *testing.T) {
	// Instructions past the end of the FDE are not executed; rows
	// end at End.
	f := fdeWith(t, []byte{0x04, 0, 0, 1, 0, 0x0e, 16, 0x1c})
	rows := collectRows(t, f)
	if len(rows) != 1 || rows[0].Start != 0x1000 || rows[0].End != 0x1100 {
		t.Errorf("rows %+v", rows)
	}
	// Advances that overflow saturate rather than wrap.
	f = fdeWith(t, []byte{0x1d, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1c})
	if rows := collectRows(t, f); len(rows) != 1 || rows[0].End != 0x1100 {
		t.Errorf("rows %+v", rows)
	}
	// Zero-length advances produce no empty rows; remember_state,
	// restore_state and restore work.
	f = fdeWith(t, []byte{0x40, 0x40, 0x0e, 32, 0x40, 0x41, 0x0a, 0x90, 2, 0x0b})
	rows = collectRows(t, f)
	if len(rows) != 2 || rows[0].CFA.Offset != 32 || rows[1].Start != 0x1001 || !eqRule(rows[1].Regs[16], Rule{Kind: RuleOffset, Offset: -8}) {
		t.Errorf("rows %+v", rows)
	}
	// A hand-built CIE and FDE (no Section): defaults to little-endian
	// .eh_frame rules.
	c := &CIE{Version: 1, CodeAlign: 1, DataAlign: -8, RAReg: 16, AddressSize: 8, Initial: stdInitial}
	hf := &FDE{CIE: c, Start: 0x10, End: 0x20, Instructions: []byte{0x03, 2, 0, 0x0e, 16, 0x01, 0x18, 0, 0, 0, 0, 0, 0, 0}}
	rows = collectRows(t, hf)
	if len(rows) != 3 || rows[0].End != 0x12 || rows[1].End != 0x18 || rows[2].CFA.Offset != 16 {
		t.Errorf("hand-built rows %+v", rows)
	}
}

func TestCIEProgramErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		initial []byte
		at      int
		msg     string
	}{
		{"advance_loc", []byte{0x0c, 7, 8, 0x41}, 3, "DW_CFA_advance_loc: not allowed in CIE"},
		{"advance_loc1", []byte{0x02, 1}, 0, "not allowed in CIE"},
		{"set_loc", []byte{0x01, 0, 0, 0, 0}, 0, "DW_CFA_set_loc: not allowed in CIE"},
		{"unknown", []byte{0x0c, 7, 8, 0x3e}, 3, "unknown call frame instruction 0x3e"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAsm()
			cie := a.entry(false, 4, newAsm().u32(0).u8(1).str("zR").uleb(1).sleb(-8).u8(16).uleb(1).u8(0x03).u8(tc.initial...).b)
			a.entry(false, 4, newAsm().u32(uint32(len(a.b)+4-cie)).u32(0x1000).u32(0x100).uleb(0).b)
			sec := ehSection(a.b, 0)
			fdes, err := Parse(sec)
			if err != nil {
				t.Fatal(err)
			}
			// Parse's cached result and FDEAt's fresh run agree.
			g, err := FDEAt(sec, fdes[0].Offset)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range []*FDE{fdes[0], g} {
				err := f.Rows(func(*Row) error { return nil })
				var fe *FormatError
				if !errors.As(err, &fe) || fe.Offset != uint64(17+tc.at) || !strings.Contains(fe.Msg, tc.msg) {
					t.Errorf("err = %v, want %q at %#x", err, tc.msg, 17+tc.at)
				}
			}
		})
	}
	// States remembered by the CIE do not reach the FDE.
	a := newAsm()
	cie := a.entry(false, 4, newAsm().u32(0).u8(1).str("zR").uleb(1).sleb(-8).u8(16).uleb(1).u8(0x03).u8(0x0c, 7, 8, 0x0a).b)
	a.entry(false, 4, newAsm().u32(uint32(len(a.b)+4-cie)).u32(0x1000).u32(0x100).uleb(0).u8(0x0b).b)
	fdes, err := Parse(ehSection(a.b, 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := fdes[0].Rows(func(*Row) error { return nil }); err == nil || !strings.Contains(err.Error(), "no remembered state") {
		t.Errorf("err = %v", err)
	}
}

func TestSetLocDebugFrame(t *testing.T) {
	a := newAsm()
	cie := a.entry(false, 4, newAsm().u32(0xffffffff).u8(4).str("").u8(4, 0).uleb(1).sleb(-4).uleb(14).u8(0x0c, 13, 0).b)
	a.entry(false, 4, newAsm().u32(uint32(cie)).u32(0x100).u32(0x20).u8(0x01).u32(0x108).u8(0x0e, 8, 0x01).u32(0x110).u8(0x0e, 16).b)
	fdes, err := Parse(dbgSection(a.b))
	if err != nil {
		t.Fatal(err)
	}
	rows := collectRows(t, fdes[0])
	if len(rows) != 3 || rows[0].End != 0x108 || rows[1].End != 0x110 || rows[2].CFA.Offset != 16 || rows[2].CFA.Reg != 13 {
		t.Errorf("rows %+v", rows)
	}
}

// TestRowsConcurrent runs Rows and RowAt on shared FDEs from several
// goroutines (run with -race): FDEs, CIEs and their cached initial rules
// are read-only after Parse.
func TestRowsConcurrent(t *testing.T) {
	fdes, err := Parse(mustSection(t, libcPath, ".eh_frame"))
	if err != nil {
		t.Fatal(err)
	}
	if testing.Short() {
		fdes = fdes[:200]
	}
	done := make(chan int)
	for g := 0; g < 4; g++ {
		go func() {
			n := 0
			for _, f := range fdes {
				f.Rows(func(*Row) error { n++; return nil })
				if _, err := f.RowAt(f.End - 1); err != nil {
					t.Error(err)
				}
			}
			done <- n
		}()
	}
	first := <-done
	for g := 1; g < 4; g++ {
		if n := <-done; n != first {
			t.Errorf("goroutines saw %d and %d rows", first, n)
		}
	}
}
