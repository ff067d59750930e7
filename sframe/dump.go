package sframe

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// Style selects which readelf's output Dump reproduces. The text of
// readelf --sframe changed with every binutils release that changed the
// format, and each release reads only some versions.
type Style uint8

// Dump styles.
const (
	// StyleAuto picks the readelf of the binutils that produces the
	// section's version: 2.40 for version 1, 2.44 for version 2 and 2.47
	// for version 3.
	StyleAuto Style = iota
	// Readelf240 is binutils 2.40 (Debian bookworm): version 1 only; the
	// RA of AMD64 is shown as "u" and no fixed offsets are printed.
	Readelf240
	// Readelf244 is binutils 2.44 (Debian trixie): versions 1 and 2, but
	// only the header of version 1; the fixed RA is shown as "f".
	Readelf244
	// Readelf247 is binutils 2.46 and later (Debian sid's 2.47.50):
	// versions 2 and 3, flags one per line, "RA undefined" rows, function
	// attributes, flexible FDEs and PC-relative start addresses.
	Readelf247
)

// DumpOptions are Dump's options; the zero value (or nil) is StyleAuto for
// a section named .sframe.
type DumpOptions struct {
	Style Style
	// SectionName is the name on the first line (default ".sframe").
	SectionName string
}

// ErrStyle is wrapped by the error Dump returns when the chosen readelf
// cannot decode the section (it would print "SFrame decode failure").
var ErrStyle = errors.New("readelf cannot decode this SFrame section")

// Dump writes the section as readelf --sframe=NAME prints it for an ELF
// file whose .sframe holds the section: from "Contents of the SFrame
// section NAME:" to the last FRE line, byte for byte. The header fields, FDE
// order and every bug-compatible detail (the flag list of 2.40 and 2.44
// that prints only SFRAME_F_FRAME_POINTER when both flags are set, "sp+-1"
// for the CFA of an FRE without data words before 2.46, %d for sizes) follow
// the chosen readelf. readelf shows relocatable objects as they are, except
// that 2.46 and later apply the .sframe relocations first (see FromELF).
//
// Differences that only matter for malformed input: this package reads the
// FDE and FRE sub-sections at the header's offsets, as the specification
// says (2.40 assumes they follow the header directly), and rejects
// sections libsframe would crash or assert on.
func Dump(w io.Writer, s *Section, opts *DumpOptions) error {
	var o DumpOptions
	if opts != nil {
		o = *opts
	}
	if o.SectionName == "" {
		o.SectionName = ".sframe"
	}
	h := &s.Header
	if o.Style == StyleAuto {
		switch h.Version {
		case Version1:
			o.Style = Readelf240
		case Version2:
			o.Style = Readelf244
		default:
			o.Style = Readelf247
		}
	}
	// What each readelf's libsframe accepts (sframe_header_sanity_check_p
	// and its decoder).
	ok := false
	switch o.Style {
	case Readelf240:
		ok = h.Version == Version1 && h.Flags&^3 == 0
	case Readelf244:
		ok = (h.Version == Version1 || h.Version == Version2) && h.Flags&^3 == 0
	case Readelf247:
		ok = h.Version == Version2 && h.Flags&^7 == 0 || h.Version == Version3 && h.Flags&^5 == 0
	default:
		return fmt.Errorf("sframe: unknown dump style %d", o.Style)
	}
	if !ok {
		return fmt.Errorf("%w: %s style, version %d, flags %#x", ErrStyle, o.Style, h.Version, h.Flags)
	}
	d := &dumper{w: bufio.NewWriter(w), s: s, style: o.Style}
	d.printf("Contents of the SFrame section %s:", o.SectionName)
	d.header()
	current := map[Style]uint8{Readelf240: Version1, Readelf244: Version2}[o.Style]
	if o.Style == Readelf247 || h.Version == current {
		d.printf("\n  Function Index :\n")
		for i := range s.fdes {
			d.function(i)
			d.printf("\n")
		}
	} else {
		d.printf("\n No further information can be displayed.  SFrame version not supported\n")
	}
	return d.w.Flush()
}

func (st Style) String() string {
	switch st {
	case StyleAuto:
		return "auto"
	case Readelf240:
		return "readelf-2.40"
	case Readelf244:
		return "readelf-2.44"
	case Readelf247:
		return "readelf-2.47"
	}
	return fmt.Sprintf("style(%d)", uint8(st))
}

type dumper struct {
	w     *bufio.Writer
	s     *Section
	style Style
}

func (d *dumper) printf(format string, args ...any) { fmt.Fprintf(d.w, format, args...) }

func (d *dumper) header() {
	h := &d.s.Header
	d.printf("\n  Header :\n\n")
	names := []string{"NULL", "SFRAME_VERSION_1", "SFRAME_VERSION_2", "SFRAME_VERSION_3"}
	d.printf("    Version: %s\n", names[h.Version])
	if d.style == Readelf247 {
		d.flags247()
	} else {
		// A buffer filled with strcpy: with both flags set only the last
		// name survives.
		f := ""
		switch {
		case h.Flags == 0:
			f = "NONE"
		case h.Flags&FlagFramePointer != 0:
			f = "SFRAME_F_FRAME_POINTER"
		case h.Flags&FlagFDESorted != 0:
			f = "SFRAME_F_FDE_SORTED"
		}
		d.printf("    Flags: %s\n", f)
	}
	if d.style != Readelf240 {
		if h.CFAFixedFPOffset != 0 {
			d.printf("    CFA fixed FP offset: %d\n", h.CFAFixedFPOffset)
		}
		if h.CFAFixedRAOffset != 0 {
			d.printf("    CFA fixed RA offset: %d\n", h.CFAFixedRAOffset)
		}
	}
	d.printf("    Num FDEs: %d\n", int32(h.NumFDEs))
	d.printf("    Num FREs: %d\n", int32(h.NumFREs))
}

func (d *dumper) flags247() {
	h := &d.s.Header
	flags := h.Flags
	if flags == 0 {
		d.printf("%11sNONE\n", "Flags: ")
		return
	}
	prefix := "Flags: "
	one := func(bit uint8, name string) {
		if flags&bit == 0 {
			return
		}
		flags &^= bit
		comma := ""
		if flags != 0 {
			comma = ","
		}
		d.printf("%11s%s%s\n", prefix, name, comma)
		prefix = " "
	}
	one(FlagFDESorted, "SFRAME_F_FDE_SORTED")
	if h.Version == Version2 {
		one(FlagFramePointer, "SFRAME_F_FRAME_POINTER")
	}
	one(FlagFuncStartPCRel, "SFRAME_F_FDE_FUNC_START_PCREL")
	if flags != 0 {
		d.printf("%11s%d\n", prefix, flags)
	}
}

// function prints one FDE and its FREs.
func (d *dumper) function(i int) {
	s, f, h := d.s, &d.s.fdes[i], &d.s.Header
	// The start address as libsframe computes it: PC-relative offsets are
	// taken from where the field would be if the FDE sub-section followed
	// the header directly (sfh_fdeoff is ignored there).
	pc := s.Addr + uint64(f.RawStart)
	if d.style == Readelf247 && h.Flags&FlagFuncStartPCRel != 0 {
		pc += uint64(s.hdrSize + i*s.FDESize())
	}
	d.printf("\n    func idx [%d]: pc = 0x%x, size = %d bytes", i, pc, int32(f.Size))
	if d.style == Readelf247 {
		attrs := ""
		if h.Version == Version3 && f.Signal() {
			attrs += "S"
		}
		if h.Version == Version3 && f.Flex() {
			attrs += "F"
		}
		if attrs != "" {
			d.printf(", attr = \"%s\"", attrs)
		}
	}
	if h.ABI.IsAArch64() && f.PAuthKeyB() {
		d.printf(", pauth = B key")
	}
	marker := "   "
	if f.PCMask() {
		marker = "[m]"
	}
	d.printf("\n    %-7s%-8s %-10s%-10s%-13s", "STARTPC", marker, "CFA", "FP", "RA")
	for e := range s.FREs(i) {
		start := pc + uint64(e.StartOffset)
		if f.PCMask() {
			start = uint64(e.StartOffset)
		}
		d.printf("\n    %016x", start)
		switch {
		case d.style == Readelf247 && h.Version == Version3 && f.Flex():
			d.flexFRE(&e)
		case d.style == Readelf247:
			d.fre247(&e)
		default:
			d.freOld(&e)
		}
	}
}

// errWord is what libsframe's accessors return for a missing data word
// (SFRAME_ERR), which readelf before 2.46 prints as the CFA offset of an FRE
// without data words.
const errWord = -1

func mangled(e *FRE) string {
	if e.RAMangled() {
		return "[s]"
	}
	return "   "
}

// freOld prints an FRE as readelf 2.40 and 2.44 do.
func (d *dumper) freOld(e *FRE) {
	h := &d.s.Header
	n := e.NumWords()
	cfa := int32(errWord)
	if n > 0 {
		cfa = e.Word(0)
	}
	d.printf("  %-10s", fmt.Sprintf("%s+%d", map[bool]string{false: "fp", true: "sp"}[e.BaseSP()], cfa))
	fp := "u"
	switch {
	case h.CFAFixedFPOffset != 0:
		if d.style == Readelf244 {
			fp = fmt.Sprintf("c%+d", h.CFAFixedFPOffset)
		}
	default:
		idx := 2
		if h.CFAFixedRAOffset != 0 {
			idx = 1
		}
		if n > idx {
			fp = fmt.Sprintf("c%+d", e.Word(idx))
		}
	}
	d.printf("%-10s", fp)
	ra := "u"
	switch {
	case h.CFAFixedRAOffset != 0:
		if d.style == Readelf244 {
			ra = "f"
		}
	case n > 1:
		ra = fmt.Sprintf("c%+d", e.Word(1))
	}
	d.printf("%-13s", ra+mangled(e))
}

// fre247 prints an FRE of a default FDE as readelf 2.46 and later do.
func (d *dumper) fre247(e *FRE) {
	h := &d.s.Header
	if e.RAUndefined() {
		d.printf("  RA undefined")
		return
	}
	n := e.NumWords()
	base := map[bool]string{false: "fp", true: "sp"}[e.BaseSP()]
	cfa := e.Word(0)
	if h.ABI == ABIS390XBE {
		cfa = cfa*8 + s390xCFAAdj
	}
	d.printf("  %-10s", fmt.Sprintf("%s+%d", base, cfa))
	regnum := func(w int32) bool { return h.ABI == ABIS390XBE && h.Version == Version2 && w&1 != 0 }
	fp := "u"
	idx := 2
	if h.CFAFixedRAOffset != 0 {
		idx = 1
	}
	switch {
	case h.CFAFixedFPOffset != 0:
		fp = fmt.Sprintf("c%+d", h.CFAFixedFPOffset)
	case n > idx:
		if w := e.Word(idx); regnum(w) {
			fp = fmt.Sprintf("r%d", w>>1)
		} else {
			fp = fmt.Sprintf("c%+d", w)
		}
	}
	d.printf("%-10s", fp)
	ra := "u"
	switch {
	case h.CFAFixedRAOffset != 0:
		ra = "f"
	case n > 1 && e.Word(1) == 0:
		ra = "U"
	case n > 1:
		if w := e.Word(1); regnum(w) {
			ra = fmt.Sprintf("r%d", w>>1)
		} else {
			ra = fmt.Sprintf("c%+d", w)
		}
	}
	d.printf("%-13s", ra+mangled(e))
}

// regName names a DWARF register the way readelf does in flexible rows.
func (d *dumper) regName(r uint32) string {
	sp, fp := d.s.spfp()
	switch r {
	case uint32(sp):
		return "sp"
	case uint32(fp):
		return "fp"
	}
	return fmt.Sprintf("r%d", r)
}

// disp formats "base+offset" for a flexible row: the base is "c" (the CFA)
// unless the control word's register bit is set, and only a register base
// is shown dereferenced, in parentheses (libsframe ignores the deref bit
// otherwise).
func (d *dumper) disp(ctrl uint32, off int32) string {
	if ctrl&1 == 0 {
		return fmt.Sprintf("c%+d", off)
	}
	if ctrl&2 != 0 {
		return fmt.Sprintf("(%s%+d)", d.regName(ctrl>>3), off)
	}
	return fmt.Sprintf("%s%+d", d.regName(ctrl>>3), off)
}

// flexFRE prints an FRE of a flexible FDE as readelf 2.46 and later do.
// Words are fetched at the indexes libsframe's accessors use; a missing
// offset reads as SFRAME_ERR (-1) unless the header has a fixed offset.
func (d *dumper) flexFRE(e *FRE) {
	h := &d.s.Header
	if e.RAUndefined() {
		d.printf("  RA undefined")
		return
	}
	n := e.NumWords()
	word := func(i int) int32 {
		if i < n {
			return e.Word(i)
		}
		return errWord
	}
	cfaOff := word(1)
	if h.ABI == ABIS390XBE && n > 1 {
		cfaOff = cfaOff*8 + s390xCFAAdj
	}
	d.printf("  %-10s", d.disp(e.UWord(0), cfaOff))

	raPresent := n > 2
	raCtrl := e.UWord(2)
	// The FP's control word is at index 4, or 3 after a one-word RA
	// padding; its offset follows it.
	fpCtrlIdx := 4
	if raPresent && raCtrl == 0 {
		fpCtrlIdx = 3
	}
	fp := "u"
	fpOff, fpOK := word(fpCtrlIdx+1), n > fpCtrlIdx+1
	if !fpOK && h.CFAFixedFPOffset != 0 {
		fpOff, fpOK = int32(h.CFAFixedFPOffset), true
	}
	if n > fpCtrlIdx && fpOK {
		fp = d.disp(e.UWord(fpCtrlIdx), fpOff)
	}
	d.printf("%-10s", fp)

	var ra string
	switch {
	case !raPresent:
		ra = "u"
		if h.CFAFixedRAOffset != 0 {
			ra = "f"
		}
	case raCtrl == 0:
		ra = "U"
	default:
		raOff := word(3)
		if n <= 3 && h.CFAFixedRAOffset != 0 {
			raOff = int32(h.CFAFixedRAOffset)
		}
		ra = d.disp(raCtrl, raOff)
	}
	d.printf("%-13s", ra+mangled(e))
}
