package sframe

import (
	"bytes"
	"debug/elf"
	"fmt"

	"github.com/rewindstack/rewind/internal/elfedit"
)

// ELF constants debug/elf does not name.
const (
	shtGNUSFrame = elf.SectionType(0x6ffffff4) // SHT_GNU_SFRAME (binutils 2.45+)
	ptGNUSFrame  = elf.ProgType(0x6474e554)    // PT_GNU_SFRAME
)

// Insertion says where AddToELF put the section.
type Insertion struct {
	// Addr is the section's address; 0 when it is not loaded.
	Addr uint64
	// Note says why the section is not loaded ("" when it is).
	Note string
}

// AddToELF returns a copy of the ELF file raw with g added as its .sframe
// section, as objcopy --add-section does: in a new loadable segment with a
// PT_GNU_SFRAME program header when the file allows it, otherwise present
// but not loaded (Insertion.Note says why). Version 3 sections get the
// SHT_GNU_SFRAME type binutils 2.45 and later give them. The copy is
// parsed back before it is returned: a generator bug never produces a file
// that readers reject.
func AddToELF(raw []byte, g *Generated) ([]byte, Insertion, error) {
	typ := elf.SHT_PROGBITS
	if g.Version >= 3 {
		typ = shtGNUSFrame
	}
	out, res, err := elfedit.AddSection(raw, elfedit.Section{
		Name: ".sframe", Type: typ, Align: 8, Size: uint64(g.Size()),
		Contents: g.Encode, Load: true, Segment: ptGNUSFrame, SegmentAlign: 8,
	})
	if err != nil {
		return nil, Insertion{}, err
	}
	ins := Insertion{Addr: res.Addr}
	if !res.Loaded {
		ins.Note = ".sframe added but not loaded (no PT_GNU_SFRAME): " + res.Note
	}
	f, err := elf.NewFile(bytes.NewReader(out))
	if err == nil {
		_, err = FromELF(f, "generated file", ".sframe", false)
	}
	if err != nil {
		return nil, Insertion{}, fmt.Errorf("internal error: the generated file does not read back: %w", err)
	}
	return out, ins, nil
}

// EncodeChecked is Encode followed by parsing the bytes back, for writing
// a section on its own: a generator bug never produces a section that
// readers reject.
func (g *Generated) EncodeChecked(sectionAddr uint64) ([]byte, error) {
	out, err := g.Encode(sectionAddr)
	if err != nil {
		return nil, err
	}
	if _, err := Parse(out, sectionAddr, "generated section"); err != nil {
		return nil, fmt.Errorf("internal error: the generated section does not read back: %w", err)
	}
	return out, nil
}
