package cfi

import (
	"encoding/binary"
	"fmt"
)

// ExprContext supplies register values and memory for evaluating
// expressions at unwind time.
type ExprContext interface {
	// Reg returns the value of DWARF register n in the frame being
	// unwound, and whether it is known.
	Reg(n int) (uint64, bool)
	// ReadMemory fills p with target memory starting at addr.
	ReadMemory(addr uint64, p []byte) error
}

// Limits of the expression evaluator.
const (
	maxExprStack = 64     // stack depth
	maxExprOps   = 10_000 // executed operations (bounds loops made with skip and bra)
)

// ExprError reports a failed expression evaluation: the byte offset of
// the failing operation within the expression, what went wrong and, for
// memory reads, the ExprContext's error.
type ExprError struct {
	Offset int
	Msg    string
	Err    error
}

// Error formats the error as "cfi: DWARF expression+OFFSET: MSG[: ERR]".
func (e *ExprError) Error() string {
	s := fmt.Sprintf("cfi: DWARF expression+%d: %s", e.Offset, e.Msg)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying error, if any.
func (e *ExprError) Unwrap() error { return e.Err }

// EvalExpr runs the DWARF expression expr as a stack machine, with the
// values in push already on the stack (push[0] deepest; the CFA for
// RuleExpression and RuleValExpression) and returns the value on top of the
// stack at the end.
//
// It supports the operations CFI uses: DW_OP_addr, deref, deref_size,
// the constants, lit0-31, breg0-31, bregx, the stack operations (dup, drop,
// over, pick, swap, rot), arithmetic and logic (abs, and, div, minus, mod,
// mul, neg, not, or, plus, plus_uconst, shl, shr, shra, xor), comparisons
// (eq, ge, gt, le, lt, ne; signed), control flow (bra, skip) and nop.
// Operations that make no sense in CFI (reg0-31, regx, fbreg, piece,
// call_frame_cfa, ...) are errors, as are stack underflow, a stack deeper
// than 64, more than 10,000 executed operations, division by zero, unknown
// registers and failed memory reads (wrapped). Operands and memory are read
// little-endian; arithmetic is 64-bit and the result is truncated to
// ptrSize (4 or 8) bytes.
func EvalExpr(expr []byte, ctx ExprContext, ptrSize int, push ...uint64) (uint64, error) {
	if ptrSize != 4 && ptrSize != 8 {
		return 0, &ExprError{Msg: fmt.Sprintf("pointer size %d, want 4 or 8", ptrSize)}
	}
	var stack [maxExprStack]uint64
	if len(push) > maxExprStack {
		return 0, &ExprError{Msg: "stack overflow"}
	}
	sp := copy(stack[:], push) // number of values on the stack
	var mem []byte             // scratch buffer for memory reads, allocated on first use
	le := binary.LittleEndian
	steps := 0
	for i := 0; i < len(expr); {
		steps++
		if steps > maxExprOps {
			return 0, &ExprError{Offset: i, Msg: fmt.Sprintf("more than %d operations executed", maxExprOps)}
		}
		at := i
		op := expr[i]
		i++
		fail := func(format string, args ...any) error {
			return &ExprError{Offset: at, Msg: opName(op) + ": " + fmt.Sprintf(format, args...)}
		}
		// need checks that the operation finds n values on the stack.
		need := func(n int) error {
			if sp < n {
				return fail("stack underflow")
			}
			return nil
		}
		var v uint64 // value to push, if push is set
		push := true
		switch {
		case op >= 0x30 && op <= 0x4f: // DW_OP_lit0-31
			v = uint64(op - 0x30)
		case op >= 0x70 && op <= 0x8f, op == 0x92: // DW_OP_breg0-31, DW_OP_bregx
			reg := uint64(op - 0x70)
			if op == 0x92 {
				if reg, i = uleb(expr, i); i < 0 {
					return 0, fail("truncated operand")
				}
			}
			var off int64
			if off, i = sleb(expr, i); i < 0 {
				return 0, fail("truncated operand")
			}
			var r uint64
			ok := false
			if ctx != nil && reg <= 1<<16 {
				r, ok = ctx.Reg(int(reg))
			}
			if !ok {
				return 0, fail("register %d unknown", reg)
			}
			v = r + uint64(off)
		default:
			switch op {
			case 0x03: // DW_OP_addr
				var ok bool
				if v, i, ok = readUint(expr, i, ptrSize, le); !ok {
					return 0, fail("truncated operand")
				}
			case 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f: // DW_OP_const1u ... const8s
				n := 1 << ((op - 0x08) / 2)
				var ok bool
				if v, i, ok = readUint(expr, i, n, le); !ok {
					return 0, fail("truncated operand")
				}
				if op&1 == 1 { // signed variants
					sh := 64 - 8*uint(n)
					v = uint64(int64(v<<sh) >> sh)
				}
			case 0x10: // DW_OP_constu
				if v, i = uleb(expr, i); i < 0 {
					return 0, fail("truncated operand")
				}
			case 0x11: // DW_OP_consts
				var s int64
				if s, i = sleb(expr, i); i < 0 {
					return 0, fail("truncated operand")
				}
				v = uint64(s)
			case 0x12: // DW_OP_dup
				if err := need(1); err != nil {
					return 0, err
				}
				v = stack[sp-1]
			case 0x13: // DW_OP_drop
				if err := need(1); err != nil {
					return 0, err
				}
				sp--
				push = false
			case 0x14: // DW_OP_over
				if err := need(2); err != nil {
					return 0, err
				}
				v = stack[sp-2]
			case 0x15: // DW_OP_pick
				if i >= len(expr) {
					return 0, fail("truncated operand")
				}
				idx := int(expr[i])
				i++
				if idx >= sp {
					return 0, fail("index %d with %d values on the stack", idx, sp)
				}
				v = stack[sp-1-idx]
			case 0x16: // DW_OP_swap
				if err := need(2); err != nil {
					return 0, err
				}
				stack[sp-1], stack[sp-2] = stack[sp-2], stack[sp-1]
				push = false
			case 0x17: // DW_OP_rot: top becomes third, second top, third second
				if err := need(3); err != nil {
					return 0, err
				}
				stack[sp-1], stack[sp-2], stack[sp-3] = stack[sp-2], stack[sp-3], stack[sp-1]
				push = false
			case 0x06, 0x94: // DW_OP_deref, DW_OP_deref_size
				n := ptrSize
				if op == 0x94 {
					if i >= len(expr) {
						return 0, fail("truncated operand")
					}
					n = int(expr[i])
					i++
					if n < 1 || n > 8 {
						return 0, fail("size %d", n)
					}
				}
				if err := need(1); err != nil {
					return 0, err
				}
				if ctx == nil {
					return 0, fail("no memory to read")
				}
				if mem == nil {
					mem = make([]byte, 8)
				}
				clear(mem)
				addr := stack[sp-1]
				if err := ctx.ReadMemory(addr, mem[:n]); err != nil {
					return 0, &ExprError{Offset: at, Msg: fmt.Sprintf("%s: reading %d bytes at %#x", opName(op), n, addr), Err: err}
				}
				stack[sp-1] = le.Uint64(mem)
				push = false
			case 0x19, 0x1f, 0x20: // DW_OP_abs, DW_OP_neg, DW_OP_not
				if err := need(1); err != nil {
					return 0, err
				}
				x := stack[sp-1]
				switch op {
				case 0x19:
					if int64(x) < 0 {
						x = -x
					}
				case 0x1f:
					x = -x
				default:
					x = ^x
				}
				stack[sp-1] = x
				push = false
			case 0x23: // DW_OP_plus_uconst
				var n uint64
				if n, i = uleb(expr, i); i < 0 {
					return 0, fail("truncated operand")
				}
				if err := need(1); err != nil {
					return 0, err
				}
				stack[sp-1] += n
				push = false
			case 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x21, 0x22, 0x24, 0x25, 0x26, 0x27,
				0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e: // binary operations
				if err := need(2); err != nil {
					return 0, err
				}
				a, b := stack[sp-2], stack[sp-1] // second, top
				sp -= 2
				switch op {
				case 0x1a: // DW_OP_and
					v = a & b
				case 0x1b: // DW_OP_div (signed)
					if b == 0 {
						return 0, fail("division by zero")
					}
					v = uint64(int64(a) / int64(b))
				case 0x1c: // DW_OP_minus
					v = a - b
				case 0x1d: // DW_OP_mod (unsigned, as GCC's unwinder)
					if b == 0 {
						return 0, fail("division by zero")
					}
					v = a % b
				case 0x1e: // DW_OP_mul
					v = a * b
				case 0x21: // DW_OP_or
					v = a | b
				case 0x22: // DW_OP_plus
					v = a + b
				case 0x24: // DW_OP_shl
					v = a << b
				case 0x25: // DW_OP_shr
					v = a >> b
				case 0x26: // DW_OP_shra
					if b > 63 {
						b = 63
					}
					v = uint64(int64(a) >> b)
				case 0x27: // DW_OP_xor
					v = a ^ b
				default: // comparisons, signed
					var t bool
					sa, sb := int64(a), int64(b)
					switch op {
					case 0x29:
						t = sa == sb
					case 0x2a:
						t = sa >= sb
					case 0x2b:
						t = sa > sb
					case 0x2c:
						t = sa <= sb
					case 0x2d:
						t = sa < sb
					case 0x2e:
						t = sa != sb
					}
					if t {
						v = 1
					}
				}
			case 0x28, 0x2f: // DW_OP_bra, DW_OP_skip
				if i+2 > len(expr) {
					return 0, fail("truncated operand")
				}
				off := int(int16(le.Uint16(expr[i:])))
				i += 2
				jump := true
				if op == 0x28 {
					if err := need(1); err != nil {
						return 0, err
					}
					sp--
					jump = stack[sp] != 0
				}
				if jump {
					if i+off < 0 || i+off > len(expr) {
						return 0, fail("branch target %d outside expression", i+off)
					}
					i += off
				}
				push = false
			case 0x96: // DW_OP_nop
				push = false
			case 0x50, 0x90, 0x91, 0x93, 0x9c, 0x9d, 0x9f, 0x18, 0x95:
				return 0, fail("not allowed in call frame information")
			default:
				if op >= 0x51 && op <= 0x6f {
					return 0, fail("not allowed in call frame information")
				}
				return 0, fail("unknown operation")
			}
		}
		if push {
			if sp >= maxExprStack {
				return 0, fail("stack deeper than %d", maxExprStack)
			}
			stack[sp] = v
			sp++
		}
	}
	if sp == 0 {
		return 0, &ExprError{Offset: len(expr), Msg: "empty stack at end of expression"}
	}
	v := stack[sp-1]
	if ptrSize == 4 {
		v &= 0xffffffff
	}
	return v, nil
}

// opName names a DW_OP for error messages.
func opName(op byte) string {
	switch {
	case op >= 0x30 && op <= 0x4f:
		return fmt.Sprintf("DW_OP_lit%d", op-0x30)
	case op >= 0x50 && op <= 0x6f:
		return fmt.Sprintf("DW_OP_reg%d", op-0x50)
	case op >= 0x70 && op <= 0x8f:
		return fmt.Sprintf("DW_OP_breg%d", op-0x70)
	}
	if n, ok := opNames[op]; ok {
		return n
	}
	return fmt.Sprintf("DW_OP_%#x", op)
}

var opNames = map[byte]string{
	0x03: "DW_OP_addr", 0x06: "DW_OP_deref", 0x08: "DW_OP_const1u", 0x09: "DW_OP_const1s",
	0x0a: "DW_OP_const2u", 0x0b: "DW_OP_const2s", 0x0c: "DW_OP_const4u", 0x0d: "DW_OP_const4s",
	0x0e: "DW_OP_const8u", 0x0f: "DW_OP_const8s", 0x10: "DW_OP_constu", 0x11: "DW_OP_consts",
	0x12: "DW_OP_dup", 0x13: "DW_OP_drop", 0x14: "DW_OP_over", 0x15: "DW_OP_pick",
	0x16: "DW_OP_swap", 0x17: "DW_OP_rot", 0x18: "DW_OP_xderef", 0x19: "DW_OP_abs",
	0x1a: "DW_OP_and", 0x1b: "DW_OP_div", 0x1c: "DW_OP_minus", 0x1d: "DW_OP_mod",
	0x1e: "DW_OP_mul", 0x1f: "DW_OP_neg", 0x20: "DW_OP_not", 0x21: "DW_OP_or",
	0x22: "DW_OP_plus", 0x23: "DW_OP_plus_uconst", 0x24: "DW_OP_shl", 0x25: "DW_OP_shr",
	0x26: "DW_OP_shra", 0x27: "DW_OP_xor", 0x28: "DW_OP_bra", 0x29: "DW_OP_eq",
	0x2a: "DW_OP_ge", 0x2b: "DW_OP_gt", 0x2c: "DW_OP_le", 0x2d: "DW_OP_lt",
	0x2e: "DW_OP_ne", 0x2f: "DW_OP_skip", 0x90: "DW_OP_regx", 0x91: "DW_OP_fbreg",
	0x92: "DW_OP_bregx", 0x93: "DW_OP_piece", 0x94: "DW_OP_deref_size", 0x95: "DW_OP_xderef_size",
	0x96: "DW_OP_nop", 0x9c: "DW_OP_call_frame_cfa", 0x9d: "DW_OP_bit_piece", 0x9f: "DW_OP_stack_value",
}

// MatchPLT recognises the CFA expression GCC and binutils emit for the
// lazy-binding PLT,
//
//	DW_OP_breg7 (rsp) N; DW_OP_breg16 (rip) 0; DW_OP_lit15; DW_OP_and;
//	DW_OP_litT; DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus
//
// that is CFA = rsp + N + (((rip & 15) >= T) << 3), and returns N and T.
func MatchPLT(expr []byte) (spOffset int64, threshold uint8, ok bool) {
	if len(expr) < 1 || expr[0] != 0x77 { // DW_OP_breg7
		return 0, 0, false
	}
	n, i := sleb(expr, 1)
	if i < 0 || i >= len(expr) || expr[i] != 0x80 { // DW_OP_breg16
		return 0, 0, false
	}
	z, i := sleb(expr, i+1)
	if i < 0 || z != 0 {
		return 0, 0, false
	}
	rest := expr[i:]
	// lit15 and litT ge lit3 shl plus
	if len(rest) != 7 || rest[0] != 0x3f || rest[1] != 0x1a ||
		rest[2] < 0x30 || rest[2] > 0x4f || rest[3] != 0x2a ||
		rest[4] != 0x33 || rest[5] != 0x24 || rest[6] != 0x22 {
		return 0, 0, false
	}
	return n, rest[2] - 0x30, true
}

// MatchBreg recognises "DW_OP_bregR off" (the value is register R + off;
// deref false) and "DW_OP_bregR off; DW_OP_deref" (deref true; GCC's
// stack-realignment (DRAP) pattern CFA = *(rbp-8)). DW_OP_bregx is
// accepted as well.
func MatchBreg(expr []byte) (reg uint16, off int64, deref bool, ok bool) {
	if len(expr) == 0 {
		return 0, 0, false, false
	}
	op := expr[0]
	i := 1
	var r uint64
	switch {
	case op >= 0x70 && op <= 0x8f:
		r = uint64(op - 0x70)
	case op == 0x92:
		if r, i = uleb(expr, i); i < 0 || r > 0xffff {
			return 0, 0, false, false
		}
	default:
		return 0, 0, false, false
	}
	if off, i = sleb(expr, i); i < 0 {
		return 0, 0, false, false
	}
	switch {
	case i == len(expr):
		return uint16(r), off, false, true
	case i == len(expr)-1 && expr[i] == 0x06:
		return uint16(r), off, true, true
	}
	return 0, 0, false, false
}
