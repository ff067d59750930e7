package cfi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// fakeCtx is an ExprContext with a few registers and one memory block.
type fakeCtx struct {
	regs  map[int]uint64
	base  uint64
	mem   []byte
	reads int
}

var errUnmapped = errors.New("unmapped")

func (c *fakeCtx) Reg(n int) (uint64, bool) { v, ok := c.regs[n]; return v, ok }

func (c *fakeCtx) ReadMemory(addr uint64, p []byte) error {
	c.reads++
	if addr < c.base || addr-c.base > uint64(len(c.mem)) || uint64(len(p)) > uint64(len(c.mem))-(addr-c.base) {
		return fmt.Errorf("read %d bytes at %#x: %w", len(p), addr, errUnmapped)
	}
	copy(p, c.mem[addr-c.base:])
	return nil
}

func newCtx() *fakeCtx {
	mem := make([]byte, 64)
	binary.LittleEndian.PutUint64(mem[0:], 0x1122334455667788)
	binary.LittleEndian.PutUint64(mem[8:], 0x8000)
	return &fakeCtx{regs: map[int]uint64{6: 0x7ff0, 7: 0x8000, 16: 0x401023, 20: 5, 300: 0x42}, base: 0x8000, mem: mem}
}

// e concatenates byte slices and bytes into an expression.
func e(parts ...any) []byte {
	var b []byte
	for _, p := range parts {
		switch v := p.(type) {
		case int:
			b = append(b, byte(v))
		case byte:
			b = append(b, v)
		case []byte:
			b = append(b, v...)
		default:
			panic(fmt.Sprintf("e: %T", p))
		}
	}
	return b
}

func uleb128(v uint64) []byte { return newAsm().uleb(v).b }
func sleb128(v int64) []byte  { return newAsm().sleb(v).b }

const (
	opAddr         = 0x03
	opDeref        = 0x06
	opConst1u      = 0x08
	opConst1s      = 0x09
	opConst2u      = 0x0a
	opConst2s      = 0x0b
	opConst4u      = 0x0c
	opConst4s      = 0x0d
	opConst8u      = 0x0e
	opConst8s      = 0x0f
	opConstu       = 0x10
	opConsts       = 0x11
	opDup          = 0x12
	opDrop         = 0x13
	opOver         = 0x14
	opPick         = 0x15
	opSwap         = 0x16
	opRot          = 0x17
	opAbs          = 0x19
	opAnd          = 0x1a
	opDiv          = 0x1b
	opMinus        = 0x1c
	opMod          = 0x1d
	opMul          = 0x1e
	opNeg          = 0x1f
	opNot          = 0x20
	opOr           = 0x21
	opPlus         = 0x22
	opPlusUconst   = 0x23
	opShl          = 0x24
	opShr          = 0x25
	opShra         = 0x26
	opXor          = 0x27
	opBra          = 0x28
	opEq           = 0x29
	opGe           = 0x2a
	opGt           = 0x2b
	opLe           = 0x2c
	opLt           = 0x2d
	opNe           = 0x2e
	opSkip         = 0x2f
	opLit0         = 0x30
	opReg0         = 0x50
	opBreg0        = 0x70
	opRegx         = 0x90
	opFbreg        = 0x91
	opBregx        = 0x92
	opPiece        = 0x93
	opDerefSize    = 0x94
	opNop          = 0x96
	opCallFrameCFA = 0x9c
)

func lit(n int) int { return opLit0 + n }

func TestEvalExpr(t *testing.T) {
	neg := func(v int64) uint64 { return uint64(v) }
	for _, c := range []struct {
		name string
		expr []byte
		push []uint64
		want uint64
	}{
		{"addr", e(opAddr, le64(0xdeadbeef)), nil, 0xdeadbeef},
		{"deref", e(opBreg0+7, 0, opDeref), nil, 0x1122334455667788},
		{"deref_size 1", e(opBreg0+7, 0, opDerefSize, 1), nil, 0x88},
		{"deref_size 2", e(opBreg0+7, 0, opDerefSize, 2), nil, 0x7788},
		{"deref_size 4", e(opBreg0+7, 0, opDerefSize, 4), nil, 0x55667788},
		{"deref chain", e(opBreg0+7, 8, opDeref, opDeref), nil, 0x1122334455667788},
		{"const1u", e(opConst1u, 0xff), nil, 0xff},
		{"const1s", e(opConst1s, 0xff), nil, neg(-1)},
		{"const2u", e(opConst2u, 0xfe, 0xff), nil, 0xfffe},
		{"const2s", e(opConst2s, 0xfe, 0xff), nil, neg(-2)},
		{"const4u", e(opConst4u, 0xfd, 0xff, 0xff, 0xff), nil, 0xfffffffd},
		{"const4s", e(opConst4s, 0xfd, 0xff, 0xff, 0xff), nil, neg(-3)},
		{"const8u", e(opConst8u, le64(0x8000000000000001)), nil, 0x8000000000000001},
		{"const8s", e(opConst8s, le64(neg(-4))), nil, neg(-4)},
		{"constu", e(opConstu, uleb128(1<<40)), nil, 1 << 40},
		{"consts", e(opConsts, sleb128(-1000)), nil, neg(-1000)},
		{"dup", e(lit(3), opDup, opPlus), nil, 6},
		{"drop", e(lit(3), lit(4), opDrop), nil, 3},
		{"over", e(lit(3), lit(4), opOver), nil, 3},
		{"pick 0", e(lit(3), lit(4), opPick, 0), nil, 4},
		{"pick 2", e(lit(3), lit(4), lit(5), opPick, 2), nil, 3},
		{"swap", e(lit(3), lit(4), opSwap, opMinus), nil, 1},
		// rot: (a b c) -> (c a b), top last.
		{"rot top", e(lit(1), lit(2), lit(3), opRot), nil, 2},
		{"rot third", e(lit(1), lit(2), lit(3), opRot, opDrop, opDrop), nil, 3},
		{"rot second", e(lit(1), lit(2), lit(3), opRot, opDrop), nil, 1},
		{"abs", e(opConsts, sleb128(-5), opAbs), nil, 5},
		{"abs positive", e(lit(5), opAbs), nil, 5},
		{"and", e(lit(12), lit(10), opAnd), nil, 8},
		{"div", e(opConsts, sleb128(-8), lit(2), opDiv), nil, neg(-4)},
		{"div min", e(opConst8s, le64(1<<63), opConsts, sleb128(-1), opDiv), nil, 1 << 63},
		{"minus", e(lit(3), lit(5), opMinus), nil, neg(-2)},
		{"mod", e(lit(17), lit(5), opMod), nil, 2},
		{"mod unsigned", e(opConsts, sleb128(-1), lit(10), opMod), nil, 5}, // 2^64-1 mod 10
		{"mul", e(lit(6), lit(7), opMul), nil, 42},
		{"neg", e(lit(6), opNeg), nil, neg(-6)},
		{"not", e(lit(0), opNot), nil, ^uint64(0)},
		{"or", e(lit(12), lit(3), opOr), nil, 15},
		{"plus", e(lit(12), lit(3), opPlus), nil, 15},
		{"plus_uconst", e(lit(1), opPlusUconst, uleb128(1000)), nil, 1001},
		{"shl", e(lit(1), lit(4), opShl), nil, 16},
		{"shl 64", e(lit(1), opConst1u, 64, opShl), nil, 0},
		{"shr", e(opConsts, sleb128(-16), opConst1u, 60, opShr), nil, 15},
		{"shra", e(opConsts, sleb128(-16), lit(2), opShra), nil, neg(-4)},
		{"shra 100", e(opConsts, sleb128(-16), opConst1u, 100, opShra), nil, neg(-1)},
		{"xor", e(lit(12), lit(10), opXor), nil, 6},
		{"eq", e(lit(3), lit(3), opEq), nil, 1},
		{"ne", e(lit(3), lit(3), opNe), nil, 0},
		{"ge", e(lit(3), lit(3), opGe), nil, 1},
		{"gt", e(lit(3), lit(3), opGt), nil, 0},
		{"le", e(lit(2), lit(3), opLe), nil, 1},
		{"lt signed", e(opConsts, sleb128(-1), lit(0), opLt), nil, 1},
		{"gt signed", e(opConsts, sleb128(-1), lit(0), opGt), nil, 0},
		{"lit0", e(lit(0)), nil, 0},
		{"lit31", e(lit(31)), nil, 31},
		{"breg0-31", e(opBreg0+20, sleb128(-2)), nil, 3},
		{"breg7", e(opBreg0+7, sleb128(16)), nil, 0x8010},
		{"bregx", e(opBregx, uleb128(300), sleb128(1)), nil, 0x43},
		{"nop", e(opNop, lit(1), opNop), nil, 1},
		{"skip", e(opSkip, 1, 0, lit(1), lit(2)), nil, 2},
		{"skip to end", e(lit(7), opSkip, 1, 0, lit(1)), nil, 7},
		{"bra taken", e(lit(1), opBra, 1, 0, lit(5), lit(6)), nil, 6},
		{"bra not taken", e(lit(0), opBra, 1, 0, lit(5)), nil, 5},
		// Loop: count 10 down to 0 with a backwards bra.
		{"loop", e(lit(10), lit(1), opMinus, opDup, opBra, 0xfa, 0xff), nil, 0},
		{"push", e(opPlusUconst, 8), []uint64{0x9000}, 0x9008},
		{"push two", e(opMinus), []uint64{10, 4}, 6},
		{"push only", nil, []uint64{0x9000}, 0x9000},
	} {
		got, err := EvalExpr(c.expr, newCtx(), 8, c.push...)
		if err != nil || got != c.want {
			t.Errorf("%s: got %#x, %v; want %#x", c.name, got, err, c.want)
		}
	}
	// The PLT expression: CFA = rsp + 8 + (((rip & 15) >= 11) << 3).
	plt := e(opBreg0+7, 8, opBreg0+16, 0, lit(15), opAnd, lit(11), opGe, lit(3), opShl, opPlus)
	for rip, want := range map[uint64]uint64{0x401020: 0x8008, 0x40102a: 0x8008, 0x40102b: 0x8010, 0x40102f: 0x8010} {
		ctx := newCtx()
		ctx.regs[16] = rip
		if got, err := EvalExpr(plt, ctx, 8); err != nil || got != want {
			t.Errorf("PLT at rip %#x: %#x %v, want %#x", rip, got, err, want)
		}
	}
	// 32-bit results are truncated; addr reads 4 bytes.
	if got, err := EvalExpr(e(opAddr, 0xff, 0xff, 0xff, 0xff, lit(2), opPlus), newCtx(), 4); err != nil || got != 1 {
		t.Errorf("ptr4: %#x %v", got, err)
	}
	if got, err := EvalExpr(e(opBreg0+7, 0, opDeref), newCtx(), 4); err != nil || got != 0x55667788 {
		t.Errorf("ptr4 deref: %#x %v", got, err)
	}
}

func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func TestEvalExprErrors(t *testing.T) {
	deep := make([]byte, 65)
	for i := range deep {
		deep[i] = byte(lit(1))
	}
	for _, c := range []struct {
		name string
		expr []byte
		push []uint64
		msg  string
		at   int
	}{
		{"empty", nil, nil, "empty stack", 0},
		{"underflow plus", e(lit(1), opPlus), nil, "DW_OP_plus: stack underflow", 1},
		{"underflow drop", e(opDrop), nil, "stack underflow", 0},
		{"underflow dup", e(opDup), nil, "stack underflow", 0},
		{"underflow over", e(lit(1), opOver), nil, "stack underflow", 1},
		{"underflow swap", e(lit(1), opSwap), nil, "stack underflow", 1},
		{"underflow rot", e(lit(1), lit(2), opRot), nil, "stack underflow", 2},
		{"underflow abs", e(opAbs), nil, "stack underflow", 0},
		{"underflow deref", e(opDeref), nil, "stack underflow", 0},
		{"underflow bra", e(opBra, 0, 0), nil, "stack underflow", 0},
		{"underflow plus_uconst", e(opPlusUconst, 1), nil, "stack underflow", 0},
		{"pick out of range", e(lit(1), opPick, 1), nil, "index 1 with 1 values", 1},
		{"too deep", deep, nil, "stack deeper than 64", 64},
		{"too deep push", e(lit(1)), make([]uint64, 64), "stack deeper than 64", 0},
		{"too many pushed", nil, make([]uint64, 65), "stack overflow", 0},
		{"infinite loop", e(opSkip, 0xfd, 0xff), nil, "more than 10000 operations", 0},
		{"div by zero", e(lit(1), lit(0), opDiv), nil, "DW_OP_div: division by zero", 2},
		{"mod by zero", e(lit(1), lit(0), opMod), nil, "DW_OP_mod: division by zero", 2},
		{"reg0", e(opReg0), nil, "DW_OP_reg0: not allowed", 0},
		{"reg31", e(opReg0 + 31), nil, "not allowed", 0},
		{"regx", e(opRegx, 1), nil, "DW_OP_regx: not allowed", 0},
		{"fbreg", e(opFbreg, 1), nil, "not allowed", 0},
		{"piece", e(lit(1), opPiece, 8), nil, "DW_OP_piece: not allowed", 1},
		{"call_frame_cfa", e(opCallFrameCFA), nil, "DW_OP_call_frame_cfa: not allowed", 0},
		{"unknown 0x00", e(0x00), nil, "unknown operation", 0},
		{"unknown 0xe0", e(lit(1), 0xe0), nil, "DW_OP_0xe0: unknown operation", 1},
		{"unknown register", e(opBreg0+3, 0), nil, "register 3 unknown", 0},
		{"unknown bregx", e(opBregx, uleb128(1<<40), 0), nil, "unknown", 0},
		{"truncated addr", e(opAddr, 1, 2), nil, "truncated operand", 0},
		{"truncated const4u", e(opConst4u, 1, 2), nil, "truncated operand", 0},
		{"truncated constu", e(opConstu, 0x80), nil, "truncated operand", 0},
		{"truncated breg", e(opBreg0+7, 0x80), nil, "truncated operand", 0},
		{"truncated pick", e(lit(1), opPick), nil, "truncated operand", 1},
		{"truncated skip", e(opSkip, 1), nil, "truncated operand", 0},
		{"truncated deref_size", e(lit(1), opDerefSize), nil, "truncated operand", 1},
		{"bad deref_size", e(lit(1), opDerefSize, 9), nil, "size 9", 1},
		{"branch outside", e(opSkip, 5, 0), nil, "outside expression", 0},
		{"branch before start", e(opSkip, 0xf0, 0xff), nil, "outside expression", 0},
	} {
		_, err := EvalExpr(c.expr, newCtx(), 8, c.push...)
		var xe *ExprError
		if !errors.As(err, &xe) || !strings.Contains(xe.Msg, c.msg) || xe.Offset != c.at {
			t.Errorf("%s: err = %v, want %q at %d", c.name, err, c.msg, c.at)
		}
	}
	// Memory read failures wrap the context's error.
	_, err := EvalExpr(e(opConst4u, 0, 0, 0, 1, opDeref), newCtx(), 8)
	if !errors.Is(err, errUnmapped) || !strings.Contains(err.Error(), "DW_OP_deref: reading 8 bytes at 0x1000000") {
		t.Errorf("memory error: %v", err)
	}
	if _, err := EvalExpr(e(lit(1), opDeref), nil, 8); err == nil {
		t.Errorf("nil context: no error")
	}
	if _, err := EvalExpr(e(opBreg0+7, 0), nil, 8); err == nil {
		t.Errorf("nil context breg: no error")
	}
	if _, err := EvalExpr(e(lit(1)), newCtx(), 3); err == nil {
		t.Errorf("ptrSize 3: no error")
	}
}

func TestEvalExprNoAllocs(t *testing.T) {
	ctx := newCtx()
	plt := e(opBreg0+7, 8, opBreg0+16, 0, lit(15), opAnd, lit(11), opGe, lit(3), opShl, opPlus)
	drap := e(opBreg0+6, sleb128(-8), opDeref)
	// The DRAP pattern dereferences rbp-8 = 0x7fe8: map it.
	ctx.base = 0x7fe8
	n := testing.AllocsPerRun(100, func() {
		if _, err := EvalExpr(plt, ctx, 8, 0x9000); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Errorf("EvalExpr(PLT) allocates %v times", n)
	}
	n = testing.AllocsPerRun(100, func() {
		if _, err := EvalExpr(drap, ctx, 8); err != nil {
			t.Fatal(err)
		}
	})
	if n > 1 {
		t.Errorf("EvalExpr(DRAP) allocates %v times", n)
	}
}

func TestMatchPLTAndBreg(t *testing.T) {
	plt := e(opBreg0+7, 8, opBreg0+16, 0, lit(15), opAnd, lit(11), opGe, lit(3), opShl, opPlus)
	if n, th, ok := MatchPLT(plt); !ok || n != 8 || th != 11 {
		t.Errorf("MatchPLT = %d %d %v", n, th, ok)
	}
	// Non-minimal LEB128 operands are still the same expression.
	alt := e(opBreg0+7, 0x90, 0x00, opBreg0+16, 0x80, 0x00, lit(15), opAnd, lit(9), opGe, lit(3), opShl, opPlus)
	if n, th, ok := MatchPLT(alt); !ok || n != 16 || th != 9 {
		t.Errorf("MatchPLT(alt) = %d %d %v", n, th, ok)
	}
	for i := range plt {
		if _, _, ok := MatchPLT(plt[:i]); ok {
			t.Errorf("MatchPLT(prefix %d) matched", i)
		}
		bad := append([]byte{}, plt...)
		bad[i] ^= 0x01
		if _, _, ok := MatchPLT(bad); ok && i != 1 && i != 6 { // bytes 1 and 6 are N and T
			t.Errorf("MatchPLT with byte %d changed matched", i)
		}
	}
	if _, _, ok := MatchPLT(append(plt, opNop)); ok {
		t.Errorf("MatchPLT with trailing op matched")
	}
	for _, c := range []struct {
		expr  []byte
		reg   uint16
		off   int64
		deref bool
		ok    bool
	}{
		{e(opBreg0+6, sleb128(-8), opDeref), 6, -8, true, true},
		{e(opBreg0+6, 0), 6, 0, false, true},
		{e(opBreg0+31, sleb128(1000)), 31, 1000, false, true},
		{e(opBregx, uleb128(300), sleb128(-4)), 300, -4, false, true},
		{e(opBregx, uleb128(70000), 0), 0, 0, false, false},
		{e(opBreg0+6, 0, opDeref, opDeref), 0, 0, false, false},
		{e(opBreg0+6, 0, lit(1)), 0, 0, false, false},
		{e(opBreg0 + 6), 0, 0, false, false},
		{e(opReg0+6, 0), 0, 0, false, false},
		{nil, 0, 0, false, false},
	} {
		reg, off, deref, ok := MatchBreg(c.expr)
		if reg != c.reg || off != c.off || deref != c.deref || ok != c.ok {
			t.Errorf("MatchBreg(%x) = %d %d %v %v", c.expr, reg, off, deref, ok)
		}
	}
}

// reExprPLT matches readelf's rendering of the PLT CFA expression.
var reExprPLT = regexp.MustCompile(`DW_CFA_def_cfa_expression \(DW_OP_breg7 \(rsp\): (\d+); DW_OP_breg16 \(rip\): 0; DW_OP_lit15; DW_OP_and; DW_OP_lit(\d+); DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus\)`)

// TestMatchPLTReal finds the PLT's CFA expression in gcc-linked
// executables (lazy, -z now and IBT PLTs) and checks that MatchPLT
// returns the offset and threshold readelf shows, and that MatchBreg
// recognises the DRAP rules of a realigning function.
func TestMatchPLTReal(t *testing.T) {
	dir := t.TempDir()
	for _, flags := range [][]string{{"-O2"}, {"-O2", "-Wl,-z,now"}, {"-O2", "-Wl,-z,ibtplt"}} {
		name := strings.Join(flags, "")
		exe := buildC(t, dir, "plt"+strings.ReplaceAll(name, ",", ""), append(flags, "-fexceptions")...)
		out, err := exec.Command("readelf", "-wN", "-wf", exe).Output()
		if err != nil {
			t.Fatalf("readelf: %v", err)
		}
		m := reExprPLT.FindStringSubmatch(string(out))
		if m == nil {
			t.Fatalf("%s: readelf shows no PLT expression", name)
		}
		wantN, _ := strconv.ParseInt(m[1], 10, 64)
		wantT, _ := strconv.ParseUint(m[2], 10, 8)
		fdes, err := Parse(mustSection(t, exe, ".eh_frame"))
		if err != nil {
			t.Fatal(err)
		}
		plts, draps, exprRules := 0, 0, 0
		for _, f := range fdes {
			err := f.Rows(func(r *Row) error {
				if r.CFA.Kind == CFAExpression {
					if n, th, ok := MatchPLT(r.CFA.Expr); ok {
						plts++
						if n != wantN || th != uint8(wantT) {
							t.Errorf("%s: MatchPLT = %d, %d; readelf shows %d, %d", name, n, th, wantN, wantT)
						}
					} else if reg, off, deref, ok := MatchBreg(r.CFA.Expr); ok && reg == 6 && off == -8 && deref {
						draps++
					} else {
						t.Errorf("%s: unrecognised CFA expression %x", name, r.CFA.Expr)
					}
				}
				if rule := r.Regs[6]; rule.Kind == RuleExpression {
					if reg, off, deref, ok := MatchBreg(rule.Expr); !ok || reg != 6 || off != 0 || deref {
						t.Errorf("%s: rbp rule %x", name, rule.Expr)
					}
					exprRules++
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if plts == 0 || draps == 0 || exprRules == 0 {
			t.Errorf("%s: %d PLT rows, %d DRAP rows, %d rbp expression rules", name, plts, draps, exprRules)
		}
		t.Logf("%s: PLT (%d, %d) in %d rows, %d DRAP rows", name, wantN, wantT, plts, draps)
	}
}
