package sframe

import (
	"fmt"
	"sort"
)

// Base is the register the CFA is computed from.
type Base uint8

// CFA bases.
const (
	BaseSP Base = iota
	BaseFP
	// BaseReg: another register, Row.CFAReg (flexible FDEs only).
	BaseReg
)

// RuleKind says how the caller's value of a register (the return address
// or the frame pointer) is recovered.
type RuleKind uint8

// Rules.
const (
	// RuleSame: the register was not saved; the caller's value is the
	// callee's ("u" in readelf's FP column). For the AArch64 return address
	// this means it is still in the link register (x30).
	RuleSame RuleKind = iota
	// RuleUndefined: the return address is undefined: the outermost frame.
	RuleUndefined
	// RuleAtCFA: saved in memory at CFA + Offset.
	RuleAtCFA
	// RuleValCFA: the value is CFA + Offset (flexible FDEs).
	RuleValCFA
	// RuleReg: the value is register Reg + Offset (flexible FDEs, and
	// s390x version 2 register saves, where Offset is 0).
	RuleReg
	// RuleAtReg: saved in memory at register Reg + Offset (flexible FDEs).
	RuleAtReg
)

var ruleNames = [...]string{"same", "undefined", "at-cfa", "val-cfa", "reg", "at-reg"}

func (k RuleKind) String() string {
	if int(k) < len(ruleNames) {
		return ruleNames[k]
	}
	return fmt.Sprintf("rule(%d)", uint8(k))
}

// Rule recovers one register of the caller.
type Rule struct {
	Kind   RuleKind
	Reg    uint8 // DWARF register number for RuleReg/RuleAtReg
	Offset int32
	// Fixed: the offset is the header's fixed offset (AMD64's RA at CFA-8),
	// not recorded in the FRE.
	Fixed bool
}

func (r Rule) String() string {
	switch r.Kind {
	case RuleAtCFA:
		return fmt.Sprintf("[cfa%+d]", r.Offset)
	case RuleValCFA:
		return fmt.Sprintf("cfa%+d", r.Offset)
	case RuleReg:
		return fmt.Sprintf("r%d%+d", r.Reg, r.Offset)
	case RuleAtReg:
		return fmt.Sprintf("[r%d%+d]", r.Reg, r.Offset)
	}
	return r.Kind.String()
}

// Row is the unwind rule SFrame gives for one PC.
type Row struct {
	// CFABase and CFAOffset: CFA = base register + CFAOffset, or, when
	// CFADeref is set (flexible FDEs), the word stored there.
	CFABase   Base
	CFAReg    uint8 // DWARF number of the base register (also set for SP/FP)
	CFAOffset int32
	CFADeref  bool
	RA, FP    Rule
	// Signal: the function is a signal trampoline (version 3).
	Signal bool
	// RAMangled: the AArch64 return address is signed (PAC); strip it.
	RAMangled bool
	// PAuthKeyB: the signing key is B rather than A.
	PAuthKeyB bool
}

func (r Row) String() string {
	base := map[Base]string{BaseSP: "sp", BaseFP: "fp", BaseReg: fmt.Sprintf("r%d", r.CFAReg)}[r.CFABase]
	cfa := fmt.Sprintf("%s%+d", base, r.CFAOffset)
	if r.CFADeref {
		cfa = "[" + cfa + "]"
	}
	s := fmt.Sprintf("cfa=%s ra=%s fp=%s", cfa, r.RA, r.FP)
	if r.Signal {
		s += " signal"
	}
	if r.RAMangled {
		s += " mangled"
	}
	return s
}

// DWARF register numbers of each ABI's stack and frame pointers.
func (s *Section) spfp() (sp, fp uint8) {
	switch {
	case s.Header.ABI.IsAArch64():
		return 31, 29
	case s.Header.ABI == ABIS390XBE:
		return 15, 11
	}
	return 7, 6
}

// FindFDE returns the index of the function descriptor covering addr (an
// address in the section's object), or -1. Sorted sections are binary
// searched; unsorted ones (relocatable objects, kernel modules) are
// scanned, and the first descriptor in section order that covers addr wins.
func (s *Section) FindFDE(addr uint64) int {
	if !s.sorted {
		for i := range s.fdes {
			if s.fdes[i].Contains(addr) {
				return i
			}
		}
		return -1
	}
	// The last FDE starting at or before addr; zero-sized descriptors may
	// share its start, so look back over those.
	i := sort.Search(len(s.fdes), func(i int) bool { return s.fdes[i].Start > addr }) - 1
	for j := i; j >= 0 && s.fdes[j].Start == s.fdes[i].Start; j-- {
		if s.fdes[j].Contains(addr) {
			return j
		}
	}
	return -1
}

// Lookup returns the row for pc, an address in the section's object (a
// runtime address minus the load bias). ok is false when no function
// descriptor covers pc.
func (s *Section) Lookup(pc uint64) (Row, bool) {
	i := s.FindFDE(pc)
	if i < 0 {
		return Row{}, false
	}
	f := &s.fdes[i]
	off := pc - f.Start
	if f.PCMask() {
		rep := uint64(f.RepSize)
		if s.Header.Version == Version1 {
			rep = 16
		}
		if rep == 0 {
			return Row{}, false
		}
		off %= rep
	}
	e, ok := s.freAt(f, off)
	if !ok {
		return Row{}, false
	}
	return s.RowOf(f, &e), true
}

// freAt returns the function's last FRE that starts at or before off. It
// skips over FREs reading only their start offset and info byte; Parse
// has validated them all.
func (s *Section) freAt(f *FDE, off uint64) (FRE, bool) {
	asz := 1 << f.FREType()
	p, best := int(f.fres), -1
	for j := uint32(0); j < f.NumFREs; j++ {
		var start uint32
		switch asz {
		case 1:
			start = uint32(s.Data[p])
		case 2:
			start = uint32(s.Order.Uint16(s.Data[p:]))
		default:
			start = s.Order.Uint32(s.Data[p:])
		}
		if uint64(start) > off {
			break
		}
		best = p
		info := s.Data[p+asz]
		p += asz + 1 + int(info>>1&0xf)<<(info>>5&3)
	}
	if best < 0 {
		return FRE{}, false
	}
	var e FRE
	s.decodeFRE(f, best, s.freBase+int(s.Header.FRELen), &e)
	return e, true
}

// RowOf interprets FRE e of function f. The interpretation follows the
// specification (and libsframe's accessors):
//   - an FRE without data words: the return address is undefined;
//   - default FDEs: word 0 is the CFA offset from SP or FP (on s390x stored
//     as (offset-160)/8); the RA is at the header's fixed offset if there is
//     one (AMD64), else at CFA + word 1 if present (AArch64, s390x), else
//     still in its register; the FP is at the header's fixed offset if
//     there is one, else at CFA + the next word if present, else unchanged.
//     On s390x an RA word of 0 is padding (RA not saved), and in version 2
//     an odd word is a DWARF register number shifted left by one;
//   - flexible FDEs (version 3): (control, offset) pairs for the CFA, the
//     RA and the FP; control bit 0 says the base is a register (bits 3 and
//     up) rather than the CFA, bit 1 that the value is loaded from there.
//     A single zero control word in the RA position is padding: the RA
//     follows the default rule, and the FP pair follows it directly.
func (s *Section) RowOf(f *FDE, e *FRE) Row {
	h := &s.Header
	spReg, fpReg := s.spfp()
	r := Row{Signal: f.Signal(), RAMangled: e.RAMangled(), PAuthKeyB: f.PAuthKeyB()}
	if e.RAUndefined() {
		r.RA.Kind = RuleUndefined
		return r
	}
	cfaOff := func(w int32) int32 {
		if h.ABI == ABIS390XBE {
			return w*8 + s390xCFAAdj
		}
		return w
	}
	defaultRA := Rule{Kind: RuleSame}
	if h.CFAFixedRAOffset != 0 {
		defaultRA = Rule{Kind: RuleAtCFA, Offset: int32(h.CFAFixedRAOffset), Fixed: true}
	}
	defaultFP := Rule{Kind: RuleSame}
	if h.CFAFixedFPOffset != 0 {
		defaultFP = Rule{Kind: RuleAtCFA, Offset: int32(h.CFAFixedFPOffset), Fixed: true}
	}
	n := e.NumWords()
	if !f.Flex() {
		r.CFABase, r.CFAReg = BaseFP, fpReg
		if e.BaseSP() {
			r.CFABase, r.CFAReg = BaseSP, spReg
		}
		r.CFAOffset = cfaOff(e.Word(0))
		saved := func(w int32) Rule {
			if h.ABI == ABIS390XBE && h.Version == Version2 && w&1 != 0 {
				return Rule{Kind: RuleReg, Reg: uint8(w >> 1)}
			}
			return Rule{Kind: RuleAtCFA, Offset: w}
		}
		r.RA, r.FP = defaultRA, defaultFP
		fpIdx := 2
		if h.CFAFixedRAOffset != 0 {
			fpIdx = 1
		} else if n > 1 {
			if w := e.Word(1); w == 0 && h.ABI == ABIS390XBE {
				r.RA = Rule{Kind: RuleSame}
			} else {
				r.RA = saved(w)
			}
		}
		if h.CFAFixedFPOffset == 0 && n > fpIdx {
			r.FP = saved(e.Word(fpIdx))
		}
		return r
	}
	// Flexible FDE.
	flex := func(ctrl uint32, off int32) Rule {
		reg, deref := ctrl&1 != 0, ctrl&2 != 0
		switch {
		case reg && deref:
			return Rule{Kind: RuleAtReg, Reg: uint8(ctrl >> 3), Offset: off}
		case reg:
			return Rule{Kind: RuleReg, Reg: uint8(ctrl >> 3), Offset: off}
		case deref:
			return Rule{Kind: RuleAtCFA, Offset: off}
		}
		return Rule{Kind: RuleValCFA, Offset: off}
	}
	ctrl := e.UWord(0)
	r.CFAOffset = cfaOff(e.Word(1))
	r.CFADeref = ctrl&2 != 0
	r.CFAReg = uint8(ctrl >> 3)
	switch {
	case ctrl&1 == 0:
		// A CFA relative to itself means nothing; take SP, the default.
		r.CFABase, r.CFAReg = BaseSP, spReg
	case r.CFAReg == spReg:
		r.CFABase = BaseSP
	case r.CFAReg == fpReg:
		r.CFABase = BaseFP
	default:
		r.CFABase = BaseReg
	}
	r.RA, r.FP = defaultRA, defaultFP
	fpIdx := 4
	if n > 2 {
		if c := e.UWord(2); c == 0 {
			fpIdx = 3 // padding
		} else {
			r.RA = flex(c, e.Word(3))
		}
	}
	if n > fpIdx {
		r.FP = flex(e.UWord(fpIdx), e.Word(fpIdx+1))
	}
	return r
}
