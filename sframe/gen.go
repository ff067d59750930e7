package sframe

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/rewindstack/rewind/cfi"
	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/regs"
)

// This file compiles DWARF call frame information into SFrame, as GNU as
// does with --gsframe, but from the CFI of a linked object rather than
// from .cfi directives. Every CFI FDE becomes one SFrame function (a PLT
// FDE whose last row is GCC's PLT expression becomes two: a PCINC FDE for
// the rows before and a PCMASK FDE for the repeated entries). A function
// any of whose rows SFrame cannot express is left out whole and reported
// with the reason, so that an unwinder falls back to CFI for it rather
// than using a half-described function.
//
// What each row becomes:
//   - CFA = SP or FP + offset, RA at CFA-8 (AMD64) or at CFA + offset or
//     still in the link register (AArch64), FP unchanged or at CFA +
//     offset: a default FRE, in every version;
//   - an undefined RA (.cfi_undefined rip, the outermost frame): an FRE
//     without data words, in every version (readers of binutils 2.44 and
//     older show such an FRE as "fp+-1");
//   - CFA on another register, CFA loaded from memory (DRAP's
//     "DW_OP_bregN off; DW_OP_deref"), RA or FP kept in a register or
//     saved at register + offset (DW_CFA_expression "DW_OP_bregN off"),
//     RA at an offset other than -8 on AMD64: a version 3 flexible FDE,
//     as gas 2.47 writes them; in versions 1 and 2 the function is
//     skipped;
//   - signal trampolines (CIE augmentation "S"): marked in version 3,
//     skipped before (gas 2.44 writes them as ordinary functions);
//   - anything else (other DWARF expressions, val_offset rules, a rule for
//     SP): skipped.

// GenOptions configure Generate.
type GenOptions struct {
	// Version is the SFrame version to produce: 2 (the default when 0),
	// 3, or 1 (the format of binutils 2.40, for the tools that read
	// nothing newer).
	Version uint8
}

// Skip is a function the generator left out, and why.
type Skip struct {
	// Start and End delimit the function's code, [Start, End).
	Start, End uint64
	// Reason says what SFrame cannot express, in the words of gas's
	// warnings where there is one.
	Reason string
}

// String renders the skip as "[start, end): reason".
func (s Skip) String() string { return fmt.Sprintf("[%#x, %#x): %s", s.Start, s.End, s.Reason) }

// GenStats describes a generated section.
type GenStats struct {
	// CFIFDEs is the number of CFI FDEs read.
	CFIFDEs int
	// Functions is the number of CFI FDEs encoded.
	Functions int
	// FDEs and FREs are the numbers of SFrame FDEs and FREs written.
	FDEs, FREs int
	// PLTs is the number of PCMASK FDEs made from PLT expressions.
	PLTs int
	// Skipped lists the functions left out, in address order.
	Skipped []Skip
	// CFISource names the CFI section the rows came from.
	CFISource string
}

// Generated is an SFrame section compiled from CFI, not yet placed: its
// size is known, and Encode lays it out at any section address.
type Generated struct {
	// Version is the SFrame version the section is written in.
	Version uint8
	// ABI is the section's ABI/arch, from the object's machine.
	ABI ABI
	// Order is the object's byte order, used for every field.
	Order binary.ByteOrder
	// Stats counts what was generated and lists what was left out.
	Stats GenStats

	fdes []genFDE
}

type genFDE struct {
	start   uint64
	size    uint32
	info    uint8 // PC type, PAuth key and signal bits; the FRE type is set by Encode
	repSize uint8
	flex    bool // a version 3 flexible FDE
	fres    []genFRE
}

// genFRE is one row in SFrame terms: CFA = (SP or FP) + words[0], and, per
// ABI, the saved RA and FP offsets in the words that follow. n = 0 marks
// the outermost frame (RA undefined).
type genFRE struct {
	off     uint32
	baseSP  bool
	mangled bool
	n       uint8
	ctrl    uint8 // bit i: words[i] is an unsigned control word (flexible FDEs)
	words   [6]int32
}

// ErrNoCFI is returned by Generate for an object without .eh_frame or
// .debug_frame.
var ErrNoCFI = errors.New("no .eh_frame or .debug_frame to generate SFrame from")

// Generate compiles the CFI of a linked object (.eh_frame, or .debug_frame
// when there is no .eh_frame) into an SFrame section for its architecture
// (amd64 or arm64). Functions that SFrame cannot describe are listed in
// the result's Stats.Skipped. Relocatable objects are refused: their CFI
// addresses are not final.
func Generate(f *elfobj.File, opt GenOptions) (*Generated, error) {
	if f.Type == elf.ET_REL {
		return nil, fmt.Errorf("sframe: %s: relocatable object: assemble it with --gsframe instead", f.Path)
	}
	src := f.EhFrame
	kind := cfi.EhFrame
	if src == nil || len(src.Data) == 0 {
		src, kind = f.DebugFrame, cfi.DebugFrame
	}
	if src == nil || len(src.Data) == 0 {
		return nil, fmt.Errorf("sframe: %s: %w", f.Path, ErrNoCFI)
	}
	ptr := 8
	if f.Class == elf.ELFCLASS32 {
		ptr = 4
	}
	sec := &cfi.Section{Name: f.Path + " " + src.Name, Kind: kind, Data: src.Data, Addr: src.Addr,
		ByteOrder: f.ByteOrder, PtrSize: ptr}
	if f.Text != nil {
		sec.TextAddr = f.Text.Addr
	}
	if f.GotPlt != nil {
		sec.DataAddr = f.GotPlt.Addr
	}
	g, err := GenerateCFI(f.Arch, f.ByteOrder, opt, sec)
	if err != nil {
		if fe := (*cfi.FormatError)(nil); errors.As(err, &fe) && fe.Section == sec.Name {
			return nil, err // it names the file: sec.Name is "PATH .eh_frame"
		}
		return nil, fmt.Errorf("sframe: %s: %w", f.Path, err)
	}
	return g, nil
}

// GenerateCFI is Generate on a CFI section already described.
func GenerateCFI(arch regs.Arch, order binary.ByteOrder, opt GenOptions, sec *cfi.Section) (*Generated, error) {
	g := &Generated{Version: opt.Version, Order: order}
	if g.Version == 0 {
		g.Version = Version2
	}
	if g.Version > Version3 {
		return nil, fmt.Errorf("cannot generate SFrame version %d (want 1, 2 or 3)", g.Version)
	}
	switch {
	case arch == regs.AMD64 && order == binary.LittleEndian:
		g.ABI = ABIAMD64LE
	case arch == regs.ARM64 && order == binary.LittleEndian:
		g.ABI = ABIAArch64LE
	case arch == regs.ARM64:
		g.ABI = ABIAArch64BE
	default:
		return nil, fmt.Errorf("no SFrame ABI for %v (%v)", arch, order)
	}
	fdes, err := cfi.Parse(sec)
	if err != nil && len(fdes) == 0 {
		return nil, err
	}
	// A damaged tail keeps the FDEs before it, as unwindtable.Build does;
	// the damage is reported as a skip so that it is not silent.
	var parseErr error = err
	g.Stats.CFISource = sec.Name
	g.Stats.CFIFDEs = len(fdes)
	sort.SliceStable(fdes, func(i, j int) bool { return fdes[i].Start < fdes[j].Start })
	var prevEnd uint64
	var prevStart uint64
	for _, fde := range fdes {
		skip := func(reason string) {
			g.Stats.Skipped = append(g.Stats.Skipped, Skip{fde.Start, fde.End, reason})
		}
		if fde.Start < prevEnd {
			skip(fmt.Sprintf("overlaps the function at %#x", prevStart))
			continue
		}
		out, reason := g.compile(arch, fde)
		if reason != "" {
			skip(reason)
			continue
		}
		prevEnd, prevStart = fde.End, fde.Start
		g.Stats.Functions++
		for _, o := range out {
			g.Stats.FREs += len(o.fres)
			if o.info&0x10 != 0 {
				g.Stats.PLTs++
			}
		}
		g.fdes = append(g.fdes, out...)
	}
	g.Stats.FDEs = len(g.fdes)
	if parseErr != nil {
		g.Stats.Skipped = append(g.Stats.Skipped, Skip{Reason: "CFI after the last FDE read is damaged: " + parseErr.Error()})
	}
	return g, nil
}

// pltRow is the CFA of GCC's lazy PLT expression, CFA = SP + off +
// (((PC & 15) >= thr) << 3).
type pltRow struct {
	off int32
	thr uint8
}

// Kinds of a register's recovery rule in SFrame terms (regRule.kind).
const (
	regDefault = iota // the ABI's default: AMD64 RA at CFA-8, else not saved
	regSame           // not saved (AArch64 RA still in the link register; FP unchanged)
	regAtCFA          // saved at CFA + off
	regReg            // in register reg (+ off); flexible FDEs only
	regAtReg          // saved at register reg + off; flexible FDEs only
)

type regRule struct {
	kind uint8
	reg  uint8
	off  int32
}

// sfRow is one CFI row restated in what SFrame can say: CFA = register +
// offset (dereferenced for DRAP), and rules for the RA and the FP.
type sfRow struct {
	start     uint64
	outermost bool
	mangled   bool
	plt       *pltRow
	cfaReg    uint8
	cfaOff    int32
	cfaDeref  bool
	ra, fp    regRule
}

// compile turns one CFI FDE into SFrame FDEs, or gives the reason it
// cannot.
func (g *Generated) compile(arch regs.Arch, fde *cfi.FDE) ([]genFDE, string) {
	size := fde.End - fde.Start
	if size > math.MaxUint32 {
		return nil, fmt.Sprintf("function of %d bytes is too large for SFrame", size)
	}
	if fde.CIE.SignalFrame && g.Version < Version3 {
		return nil, fmt.Sprintf("signal frame: SFrame version %d cannot mark one", g.Version)
	}
	var rows []sfRow
	errStop := errors.New("stop")
	var reason string
	err := fde.Rows(func(row *cfi.Row) error {
		if n := len(rows); n > 0 && rows[n-1].plt != nil {
			reason = "rows follow the PLT expression"
			return errStop
		}
		r, why := g.convert(arch, fde, row)
		if why != "" {
			reason = fmt.Sprintf("%s (at %#x)", why, row.Start)
			return errStop
		}
		rows = append(rows, r)
		return nil
	})
	if reason != "" {
		return nil, reason
	}
	if err != nil {
		return nil, "CFI program: " + err.Error()
	}
	var plt *pltRow
	pltStart := fde.End
	if n := len(rows); n > 0 && rows[n-1].plt != nil {
		plt, pltStart = rows[n-1].plt, rows[n-1].start
		rows = rows[:n-1]
	}
	// A function is written as a flexible FDE (version 3) when a row needs
	// more than the default encoding: then all its rows use it.
	flex := false
	for i := range rows {
		if why := g.defaultOK(arch, &rows[i]); why != "" {
			if g.Version < Version3 {
				return nil, fmt.Sprintf("%s (at %#x)", why, rows[i].start)
			}
			flex = true
		}
	}
	var fres []genFRE
	for i := range rows {
		e, why := g.encodeRow(arch, &rows[i], flex)
		if why != "" {
			return nil, fmt.Sprintf("%s (at %#x)", why, rows[i].start)
		}
		e.off = uint32(rows[i].start - fde.Start)
		if n := len(fres); n > 0 {
			last := fres[n-1]
			last.off = e.off
			if last == e {
				continue // SFrame does not see what changed
			}
		}
		fres = append(fres, e)
	}
	info := uint8(0)
	if fde.CIE.SignalFrame {
		info |= 0x80
	}
	if g.ABI.IsAArch64() && strings.ContainsRune(fde.CIE.Augmentation, 'B') {
		info |= 0x20 // return addresses signed with key B (.cfi_b_key_frame)
	}
	var out []genFDE
	if len(fres) > 0 {
		out = append(out, genFDE{start: fde.Start, size: uint32(pltStart - fde.Start), info: info, flex: flex, fres: fres})
	}
	if plt != nil {
		// The PLT entries repeat every 16 bytes from pltStart, which must
		// be 16-aligned for (PC & 15) to equal the offset in the block.
		if pltStart%16 != 0 {
			return nil, fmt.Sprintf("PLT expression starts at %#x, not on a 16-byte boundary", pltStart)
		}
		lo := genFRE{baseSP: true, n: 1, words: [6]int32{plt.off}}
		hi := genFRE{off: uint32(plt.thr), baseSP: true, n: 1, words: [6]int32{plt.off + 8}}
		out = append(out, genFDE{start: pltStart, size: uint32(fde.End - pltStart), info: info | 0x10,
			repSize: 16, fres: []genFRE{lo, hi}})
	}
	for _, o := range out {
		if g.Version == Version3 && len(o.fres) > math.MaxUint16 {
			return nil, fmt.Sprintf("%d rows: more than SFrame version 3 allows in one function", len(o.fres))
		}
	}
	return out, ""
}

// convert restates one CFI row, or says why SFrame cannot express it in
// any version.
func (g *Generated) convert(arch regs.Arch, fde *cfi.FDE, row *cfi.Row) (sfRow, string) {
	r := sfRow{start: row.Start}
	sp, fp, ra := arch.SP(), arch.FP(), int(fde.CIE.RAReg)
	if ra != arch.RA() {
		return r, fmt.Sprintf("return address column %d is not %s", ra, arch.RegName(arch.RA()))
	}
	rule := func(n int) cfi.Rule {
		x := row.Regs[n]
		if x.Kind == cfi.RuleRegister && int(x.Reg) == n {
			x = cfi.Rule{Kind: cfi.RuleSameValue}
		}
		return x
	}
	r.mangled = row.RASigned && g.ABI.IsAArch64()
	if rule(ra).Kind == cfi.RuleUndefined {
		r.outermost = true
		return r, ""
	}
	// The CFA.
	switch {
	case row.CFA.Kind == cfi.CFAExpression:
		if off, thr, ok := cfi.MatchPLT(row.CFA.Expr); ok && arch == regs.AMD64 && thr > 0 && thr < 16 &&
			off >= math.MinInt32 && off <= math.MaxInt32-8 {
			r.plt = &pltRow{off: int32(off), thr: thr}
			break
		}
		reg, off, deref, ok := cfi.MatchBreg(row.CFA.Expr)
		if !ok || reg >= 32 || off < math.MinInt32 || off > math.MaxInt32 {
			return r, "CFA is a DWARF expression (.cfi_def_cfa_expression)"
		}
		r.cfaReg, r.cfaOff, r.cfaDeref = uint8(reg), int32(off), deref
	default:
		if row.CFA.Reg >= 32 {
			return r, fmt.Sprintf("CFA is based on register %d", row.CFA.Reg)
		}
		if row.CFA.Offset < math.MinInt32 || row.CFA.Offset > math.MaxInt32 {
			return r, fmt.Sprintf("CFA offset %d does not fit in 32 bits", row.CFA.Offset)
		}
		r.cfaReg, r.cfaOff = uint8(row.CFA.Reg), int32(row.CFA.Offset)
	}
	if x := rule(sp); x.Kind != cfi.RuleSameValue && !(x.Kind == cfi.RuleValOffset && x.Offset == 0) {
		return r, "SP " + describe(arch, x)
	}
	var why string
	if r.ra, why = regRuleOf(arch, rule(ra)); why != "" {
		return r, "RA " + why
	}
	if g.ABI == ABIAMD64LE && r.ra.kind == regAtCFA && r.ra.off == -8 {
		r.ra = regRule{kind: regDefault}
	}
	if r.ra.kind == regSame {
		if g.ABI == ABIAMD64LE {
			return r, "RA not saved (the CFI says it stays in place)"
		}
		r.ra = regRule{kind: regDefault}
	}
	if r.fp, why = regRuleOf(arch, rule(fp)); why != "" {
		return r, "FP " + why
	}
	if r.fp.kind == regSame {
		r.fp = regRule{kind: regDefault}
	}
	if r.plt != nil && (r.ra.kind != regDefault || r.fp.kind != regDefault) {
		return r, "PLT expression with the RA or FP saved elsewhere"
	}
	return r, ""
}

// regRuleOf restates a CFI register rule.
func regRuleOf(arch regs.Arch, x cfi.Rule) (regRule, string) {
	fits := func(v int64) bool { return v >= math.MinInt32 && v <= math.MaxInt32 }
	switch x.Kind {
	case cfi.RuleSameValue:
		return regRule{kind: regSame}, ""
	case cfi.RuleOffset:
		if fits(x.Offset) {
			return regRule{kind: regAtCFA, off: int32(x.Offset)}, ""
		}
	case cfi.RuleRegister:
		if x.Reg < 32 {
			return regRule{kind: regReg, reg: uint8(x.Reg)}, ""
		}
	case cfi.RuleExpression:
		// DW_OP_bregR off: saved at R + off.
		if reg, off, deref, ok := cfi.MatchBreg(x.Expr); ok && !deref && reg < 32 && fits(off) {
			return regRule{kind: regAtReg, reg: uint8(reg), off: int32(off)}, ""
		}
	}
	return regRule{}, describe(arch, x)
}

// defaultOK says why a row needs a flexible FDE, or "".
func (g *Generated) defaultOK(arch regs.Arch, r *sfRow) string {
	if r.outermost {
		return ""
	}
	switch {
	case r.cfaDeref:
		return "CFA is loaded from memory (.cfi_def_cfa_expression DW_OP_deref)"
	case int(r.cfaReg) != arch.SP() && int(r.cfaReg) != arch.FP():
		return fmt.Sprintf("CFA is based on %s, not on SP or FP", regName(arch, int(r.cfaReg)))
	}
	if g.ABI == ABIAMD64LE && r.ra.kind == regAtCFA {
		return fmt.Sprintf("RA saved at CFA%+d, not at CFA-8", r.ra.off)
	}
	for _, x := range []struct {
		name string
		r    regRule
	}{{"RA", r.ra}, {"FP", r.fp}} {
		switch x.r.kind {
		case regReg:
			return fmt.Sprintf("%s kept in %s (.cfi_register)", x.name, regName(arch, int(x.r.reg)))
		case regAtReg:
			return fmt.Sprintf("%s saved at %s%+d (.cfi_escape DW_CFA_expression)", x.name, regName(arch, int(x.r.reg)), x.r.off)
		}
	}
	if g.ABI.IsAArch64() && r.fp.kind != regDefault && r.ra.kind == regDefault {
		return "FP saved while the RA is still in the link register"
	}
	return ""
}

// encodeRow encodes a row as a default or a flexible FRE.
func (g *Generated) encodeRow(arch regs.Arch, r *sfRow, flex bool) (genFRE, string) {
	e := genFRE{mangled: r.mangled}
	if r.outermost {
		return e, ""
	}
	if !flex {
		e.baseSP = int(r.cfaReg) == arch.SP()
		e.words[0], e.n = r.cfaOff, 1
		if g.ABI == ABIAMD64LE {
			if r.fp.kind == regAtCFA {
				e.words[1], e.n = r.fp.off, 2
			}
			return e, ""
		}
		if r.ra.kind == regAtCFA {
			e.words[1], e.n = r.ra.off, 2
		}
		if r.fp.kind == regAtCFA {
			e.words[2], e.n = r.fp.off, 3
		}
		return e, ""
	}
	// Flexible: (control, offset) pairs for the CFA, the RA and the FP;
	// control = register << 3 | deref << 1 | register-based. A single zero
	// control word stands for a default RA followed by an FP pair.
	put := func(ctrl uint32, off int32) {
		e.ctrl |= 1 << e.n
		e.words[e.n] = int32(ctrl)
		e.words[e.n+1] = off
		e.n += 2
	}
	ctrl := uint32(r.cfaReg)<<3 | 1
	if r.cfaDeref {
		ctrl |= 2
	}
	put(ctrl, r.cfaOff)
	pair := func(x regRule) bool {
		switch x.kind {
		case regAtCFA:
			put(2, x.off)
		case regReg:
			put(uint32(x.reg)<<3|1, x.off)
		case regAtReg:
			put(uint32(x.reg)<<3|3, x.off)
		default:
			return false
		}
		return true
	}
	if !pair(r.ra) && r.fp.kind != regDefault {
		e.ctrl |= 1 << e.n
		e.n++ // padding: the default RA rule
	}
	pair(r.fp)
	return e, ""
}

func regName(arch regs.Arch, r int) string {
	if r < arch.NumRegs() {
		return arch.RegName(r)
	}
	return fmt.Sprintf("register %d", r)
}

// describe renders a register rule for a skip reason.
func describe(arch regs.Arch, r cfi.Rule) string {
	switch r.Kind {
	case cfi.RuleOffset:
		return fmt.Sprintf("saved at CFA%+d", r.Offset)
	case cfi.RuleValOffset:
		return fmt.Sprintf("is CFA%+d (.cfi_val_offset)", r.Offset)
	case cfi.RuleRegister:
		return fmt.Sprintf("kept in %s (.cfi_register)", regName(arch, int(r.Reg)))
	case cfi.RuleExpression:
		return "saved at a DWARF expression (.cfi_escape DW_CFA_expression)"
	case cfi.RuleValExpression:
		return "is a DWARF expression (DW_CFA_val_expression)"
	case cfi.RuleUndefined:
		return "undefined (.cfi_undefined)"
	case cfi.RuleSameValue:
		return "not saved"
	}
	return r.Kind.String()
}
