package sframe

import (
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
	Version uint8
	ABI     ABI
	Order   binary.ByteOrder
	Stats   GenStats

	fdes []genFDE
}

type genFDE struct {
	start   uint64
	size    uint32
	info    uint8 // PC type, PAuth key and signal bits; the FRE type is set by Encode
	repSize uint8
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
	words   [3]int32
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
	if f.Type == elfTypeRel {
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
	if f.Class == elfClass32 {
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

// Local copies of debug/elf constants keep the imports of this file to
// what it needs.
const (
	elfTypeRel = 1 // elf.ET_REL
	elfClass32 = 1 // elf.ELFCLASS32
)

// pltRow is the CFA of GCC's lazy PLT expression, CFA = SP + off +
// (((PC & 15) >= thr) << 3).
type pltRow struct {
	off int32
	thr uint8
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
	var fres []genFRE
	var plt *pltRow
	var pltStart uint64
	errStop := errors.New("stop")
	var reason string
	err := fde.Rows(func(row *cfi.Row) error {
		if plt != nil {
			reason = "rows follow the PLT expression"
			return errStop
		}
		e, p, why := g.convert(arch, fde, row)
		if why != "" {
			reason = fmt.Sprintf("%s (at %#x)", why, row.Start)
			return errStop
		}
		if p != nil {
			plt, pltStart = p, row.Start
			return nil
		}
		e.off = uint32(row.Start - fde.Start)
		if n := len(fres); n > 0 {
			last := fres[n-1]
			last.off = e.off
			if last == e {
				return nil // SFrame does not see what changed
			}
		}
		fres = append(fres, e)
		return nil
	})
	if reason != "" {
		return nil, reason
	}
	if err != nil {
		return nil, "CFI program: " + err.Error()
	}
	var out []genFDE
	info := uint8(0)
	if fde.CIE.SignalFrame {
		info |= 0x80
	}
	if g.ABI.IsAArch64() && strings.ContainsRune(fde.CIE.Augmentation, 'B') {
		info |= 0x20 // return addresses signed with key B (.cfi_b_key_frame)
	}
	if plt == nil {
		out = append(out, genFDE{start: fde.Start, size: uint32(size), info: info, fres: fres})
	} else {
		// The PLT entries repeat every 16 bytes from pltStart, which must
		// be 16-aligned for (PC & 15) to equal the offset in the block.
		if pltStart%16 != 0 {
			return nil, fmt.Sprintf("PLT expression starts at %#x, not on a 16-byte boundary", pltStart)
		}
		if len(fres) > 0 {
			out = append(out, genFDE{start: fde.Start, size: uint32(pltStart - fde.Start), info: info, fres: fres})
		}
		lo := genFRE{baseSP: true, n: 1, words: [3]int32{plt.off}}
		hi := genFRE{off: uint32(plt.thr), baseSP: true, n: 1, words: [3]int32{plt.off + 8}}
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

// convert expresses one CFI row in SFrame terms, or says why it cannot.
func (g *Generated) convert(arch regs.Arch, fde *cfi.FDE, row *cfi.Row) (genFRE, *pltRow, string) {
	var e genFRE
	sp, fp, ra := arch.SP(), arch.FP(), int(fde.CIE.RAReg)
	if ra != arch.RA() {
		return e, nil, fmt.Sprintf("return address column %d is not %s", ra, arch.RegName(arch.RA()))
	}
	rule := func(r int) cfi.Rule {
		x := row.Regs[r]
		if x.Kind == cfi.RuleRegister && int(x.Reg) == r {
			x = cfi.Rule{Kind: cfi.RuleSameValue}
		}
		return x
	}
	e.mangled = row.RASigned && g.ABI.IsAArch64()
	if r := rule(ra); r.Kind == cfi.RuleUndefined {
		return genFRE{mangled: e.mangled}, nil, "" // the outermost frame
	}
	// The CFA.
	var plt *pltRow
	switch {
	case row.CFA.Kind == cfi.CFAExpression:
		off, thr, ok := cfi.MatchPLT(row.CFA.Expr)
		if !ok || arch != regs.AMD64 || thr == 0 || thr > 15 || off < math.MinInt32 || off > math.MaxInt32-8 {
			return e, nil, "CFA is a DWARF expression (.cfi_def_cfa_expression)"
		}
		plt = &pltRow{off: int32(off), thr: thr}
	case int(row.CFA.Reg) == sp:
		e.baseSP = true
	case int(row.CFA.Reg) == fp:
	default:
		return e, nil, fmt.Sprintf("CFA is based on %s, not on SP or FP", regName(arch, int(row.CFA.Reg)))
	}
	if plt == nil {
		if row.CFA.Offset < math.MinInt32 || row.CFA.Offset > math.MaxInt32 {
			return e, nil, fmt.Sprintf("CFA offset %d does not fit in 32 bits", row.CFA.Offset)
		}
		e.words[0] = int32(row.CFA.Offset)
	}
	e.n = 1
	if r := rule(sp); r.Kind != cfi.RuleSameValue && !(r.Kind == cfi.RuleValOffset && r.Offset == 0) {
		return e, nil, fmt.Sprintf("SP has a %v rule", r.Kind)
	}
	// The return address.
	raOff, raSaved := int32(0), false
	switch r := rule(ra); {
	case g.ABI == ABIAMD64LE:
		if r.Kind != cfi.RuleOffset || r.Offset != -8 {
			return e, nil, fmt.Sprintf("RA is not at CFA-8 (%s)", describe(r))
		}
	case r.Kind == cfi.RuleSameValue:
	case r.Kind == cfi.RuleOffset && r.Offset >= math.MinInt32 && r.Offset <= math.MaxInt32:
		raOff, raSaved = int32(r.Offset), true
	default:
		return e, nil, fmt.Sprintf("RA %s", describe(r))
	}
	// The frame pointer.
	fpOff, fpSaved := int32(0), false
	switch r := rule(fp); {
	case r.Kind == cfi.RuleSameValue:
	case r.Kind == cfi.RuleOffset && r.Offset >= math.MinInt32 && r.Offset <= math.MaxInt32:
		fpOff, fpSaved = int32(r.Offset), true
	default:
		return e, nil, fmt.Sprintf("FP %s", describe(r))
	}
	if plt != nil {
		if fpSaved || raSaved {
			return e, nil, "PLT expression with a saved FP"
		}
		return e, plt, ""
	}
	if g.ABI == ABIAMD64LE {
		if fpSaved {
			e.words[1], e.n = fpOff, 2
		}
		return e, nil, ""
	}
	// AArch64: [CFA, RA] or [CFA, RA, FP]; the format has no way to say
	// "FP saved, RA still in the link register".
	if fpSaved && !raSaved {
		return e, nil, "FP saved while the RA is still in the link register"
	}
	if raSaved {
		e.words[1], e.n = raOff, 2
	}
	if fpSaved {
		e.words[2], e.n = fpOff, 3
	}
	return e, nil, ""
}

func regName(arch regs.Arch, r int) string {
	if r < arch.NumRegs() {
		return arch.RegName(r)
	}
	return fmt.Sprintf("register %d", r)
}

// describe renders a register rule for a skip reason.
func describe(r cfi.Rule) string {
	switch r.Kind {
	case cfi.RuleOffset:
		return fmt.Sprintf("saved at CFA%+d", r.Offset)
	case cfi.RuleValOffset:
		return fmt.Sprintf("is CFA%+d (.cfi_val_offset)", r.Offset)
	case cfi.RuleRegister:
		return fmt.Sprintf("kept in register %d (.cfi_register)", r.Reg)
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
