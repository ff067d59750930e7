package unwindtable

import "fmt"

// CFABase says how the canonical frame address (the caller's stack pointer
// after return) is computed.
type CFABase uint8

// CFA computations. Offsets are in Rule.CFAOffset.
const (
	// CFANone marks a PC range with no unwind information (a gap between
	// FDEs). Lookup never returns it.
	CFANone CFABase = iota
	// CFASP: CFA = SP + offset.
	CFASP
	// CFAFP: CFA = FP + offset.
	CFAFP
	// CFAReg: CFA = register CFAReg + offset.
	CFAReg
	// CFARegDeref: CFA = *(register CFAReg + offset). GCC's stack
	// realignment (DRAP) pattern and glibc's signal trampoline use it.
	CFARegDeref
	// CFAPLT: CFA = SP + offset + (((PC & 15) >= CFAReg) << 3), the PLT
	// template GCC and binutils emit; CFAReg holds the threshold.
	CFAPLT
	// CFAExpr: CFA = evaluate Table.Expr(CFAOffset).
	CFAExpr
)

// RegKind says how a register (the return address or the frame pointer) of
// the caller is recovered.
type RegKind uint8

// Register recovery rules.
const (
	// RegSame: the caller's value is the callee's value (no rule).
	RegSame RegKind = iota
	// RegUndefined: the value is not recoverable. For the return address it
	// marks the outermost frame.
	RegUndefined
	// RegAtCFA: saved in memory at CFA + offset.
	RegAtCFA
	// RegValCFA: the value is CFA + offset.
	RegValCFA
	// RegInReg: the value is in register Reg (offset unused).
	RegInReg
	// RegExpr: saved in memory at the address computed by Table.Expr(offset)
	// with the CFA pushed first.
	RegExpr
	// RegValExpr: the value is Table.Expr(offset) with the CFA pushed first.
	RegValExpr
)

// Rule flags.
const (
	// FlagSignal marks a signal trampoline (CIE augmentation 'S'): the
	// caller's PC is exact, not a return address.
	FlagSignal uint8 = 1 << iota
	// FlagRASigned marks arm64 code where the return address is signed with
	// pointer authentication (DW_CFA_AARCH64_negate_ra_state).
	FlagRASigned
)

// Rule is one deduplicated unwind rule: how to compute the CFA, the return
// address and the frame pointer of the caller. Rules are 16 bytes and
// comparable, so a table stores each distinct rule once.
type Rule struct {
	CFABase CFABase
	// CFAReg is the DWARF register for CFAReg/CFARegDeref, or the PLT
	// threshold for CFAPLT.
	CFAReg uint8
	RAKind RegKind
	FPKind RegKind
	// RAReg and FPReg are the source registers for RegInReg.
	RAReg uint8
	FPReg uint8
	Flags uint8
	_     uint8
	// CFAOffset is the CFA offset, or an expression index for CFAExpr.
	CFAOffset int32
	// RAOffset and FPOffset are CFA-relative offsets, or expression
	// indexes for RegExpr/RegValExpr.
	RAOffset int32
	FPOffset int32
}

// String renders a rule compactly, in the style of readelf's frames-interp
// ("cfa=rsp+16 ra=c-8 fp=c-16").
func (r Rule) String() string {
	var cfa string
	switch r.CFABase {
	case CFANone:
		return "no-info"
	case CFASP:
		cfa = fmt.Sprintf("sp%+d", r.CFAOffset)
	case CFAFP:
		cfa = fmt.Sprintf("fp%+d", r.CFAOffset)
	case CFAReg:
		cfa = fmt.Sprintf("r%d%+d", r.CFAReg, r.CFAOffset)
	case CFARegDeref:
		cfa = fmt.Sprintf("*(r%d%+d)", r.CFAReg, r.CFAOffset)
	case CFAPLT:
		cfa = fmt.Sprintf("plt(sp%+d,%d)", r.CFAOffset, r.CFAReg)
	case CFAExpr:
		cfa = fmt.Sprintf("expr#%d", r.CFAOffset)
	}
	s := "cfa=" + cfa + " ra=" + regRuleString(r.RAKind, r.RAReg, r.RAOffset) +
		" fp=" + regRuleString(r.FPKind, r.FPReg, r.FPOffset)
	if r.Flags&FlagSignal != 0 {
		s += " signal"
	}
	if r.Flags&FlagRASigned != 0 {
		s += " ra-signed"
	}
	return s
}

func regRuleString(k RegKind, reg uint8, off int32) string {
	switch k {
	case RegSame:
		return "same"
	case RegUndefined:
		return "undef"
	case RegAtCFA:
		return fmt.Sprintf("c%+d", off)
	case RegValCFA:
		return fmt.Sprintf("v:c%+d", off)
	case RegInReg:
		return fmt.Sprintf("r%d", reg)
	case RegExpr:
		return fmt.Sprintf("expr#%d", off)
	case RegValExpr:
		return fmt.Sprintf("vexpr#%d", off)
	}
	return "?"
}
