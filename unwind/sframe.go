package unwind

import (
	"errors"
	"fmt"

	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/sframe"
	"github.com/rewindstack/rewind/target"
)

// SFrame unwinds with a module's .sframe section (see package sframe).
// Put it before CFITable to prefer SFrame where an object has it and fall
// back to CFI (and frame pointers) where it does not, as Auto does.
//
// For each frame it looks up the PC (c.PC, the lookup address: the return
// address minus one for callers) minus the mapping's load bias in the
// module's section, then computes CFA = SP or FP + offset, RA = the word
// at CFA + RA offset (AMD64: the header's fixed -8; AArch64: the link
// register when the row records no RA, which is only known in frame 0),
// and FP = the word at CFA + FP offset, or unchanged.
//
// It returns ErrNoInfo (so the next stepper runs) when the PC is not in a
// module with a usable .sframe, when no FDE covers it, and for signal
// trampolines (version 3 FDEs marked as signal frames): SFrame cannot
// describe the kernel's signal frame, and CFITable and FramePointers
// restore the interrupted context from it (the latter recognises
// __restore_rt by its code, as eu-stack does). A row whose RA is undefined
// ends the walk with ErrOutermost. s390x sections are never used (rewind
// does not unwind s390x).
type SFrame struct {
	// Source, when set, supplies each module's section instead of the
	// module's own .sframe (one generated from its CFI, for example); it
	// returns nil and no error for a module without one. It must be safe
	// for concurrent use.
	Source func(mod *target.Module) (*sframe.Section, error)
}

// Method implements Stepper.
func (SFrame) Method() Method { return MethodSFrame }

var sframeKey = target.NewMemoKey()

type sframeEntry struct {
	sec *sframe.Section
	err error
}

// SFrameSection returns the module's own .sframe section, parsed once per
// module; nil (and no error) when it has none.
func SFrameSection(mod *target.Module) (*sframe.Section, error) {
	if mod == nil || mod.File == nil || mod.File.SFrame == nil {
		return nil, nil
	}
	e := mod.Memo(sframeKey, func(mod *target.Module) any {
		s := mod.File.SFrame
		data, err := s.Load()
		if err != nil {
			return &sframeEntry{err: err}
		}
		sec, err := sframe.Parse(data, s.Addr, mod.Path+" "+s.Name)
		return &sframeEntry{sec: sec, err: err}
	}).(*sframeEntry)
	return e.sec, e.err
}

// archOK reports whether a section's ABI is the register set's.
func archOK(abi sframe.ABI, arch regs.Arch) bool {
	switch arch {
	case regs.AMD64:
		return abi == sframe.ABIAMD64LE
	case regs.ARM64:
		return abi.IsAArch64()
	}
	return false
}

// ErrSignalFrame is wrapped (with ErrNoInfo) by the error SFrame.Step
// returns for a signal trampoline.
var ErrSignalFrame = errors.New("sframe: signal frame left to the next stepper")

// Step implements Stepper.
func (st SFrame) Step(c *Cursor) error {
	if c.Map == nil || c.Map.Module == nil || (st.Source == nil && c.info != nil && !c.info.hasSFrame) {
		return ErrNoInfo
	}
	var sec *sframe.Section
	var err error
	if st.Source != nil {
		sec, err = st.Source(c.Map.Module)
	} else {
		sec, err = SFrameSection(c.Map.Module)
	}
	if err != nil || sec == nil || !archOK(sec.Header.ABI, c.Regs.Arch) {
		return ErrNoInfo
	}
	row, ok := sec.Lookup(c.PC - c.Map.Bias)
	if !ok {
		return ErrNoInfo
	}
	if row.Signal {
		return fmt.Errorf("%w: %w", ErrNoInfo, ErrSignalFrame)
	}
	return applySFrame(c, row)
}

// applySFrame computes the caller's registers from a row: c.Caller gets
// the caller's PC, SP (the CFA) and, when known, FP.
func applySFrame(c *Cursor, row sframe.Row) error {
	arch := c.Regs.Arch
	if row.RA.Kind == sframe.RuleUndefined {
		return ErrOutermost
	}
	reg := func(n int) (uint64, error) {
		v, ok := c.get(n)
		if !ok {
			return 0, fmt.Errorf("%w: %s", ErrRegister, arch.RegName(n))
		}
		return v, nil
	}
	var base int
	switch row.CFABase {
	case sframe.BaseSP:
		base = arch.SP()
	case sframe.BaseFP:
		base = arch.FP()
	default:
		base = int(row.CFAReg)
	}
	cfa, err := reg(base)
	if err != nil {
		return err
	}
	cfa += uint64(int64(row.CFAOffset))
	if row.CFADeref {
		if cfa, err = c.Read(cfa); err != nil {
			return err
		}
	}
	recover := func(r sframe.Rule, self int) (uint64, error) {
		switch r.Kind {
		case sframe.RuleSame:
			if self == arch.FP() {
				// The frame pointer's value goes to the caller's.
				if v, ok := c.passed(self); ok {
					return v, nil
				}
			}
			return reg(self)
		case sframe.RuleAtCFA:
			return c.Read(cfa + uint64(int64(r.Offset)))
		case sframe.RuleValCFA:
			return cfa + uint64(int64(r.Offset)), nil
		case sframe.RuleReg:
			v, err := reg(int(r.Reg))
			return v + uint64(int64(r.Offset)), err
		case sframe.RuleAtReg:
			v, err := reg(int(r.Reg))
			if err != nil {
				return 0, err
			}
			return c.Read(v + uint64(int64(r.Offset)))
		}
		return 0, ErrOutermost
	}
	ra, err := recover(row.RA, arch.RA())
	if err != nil {
		return err
	}
	if arch == regs.ARM64 {
		// Strip pointer-authentication bits (user addresses use at most
		// 48 bits on Linux); harmless for unsigned addresses.
		ra &= 1<<48 - 1
	}
	*c.Caller = regs.New(arch)
	c.Caller.Set(arch.SP(), cfa)
	c.Caller.Set(arch.PC(), ra)
	// A frame pointer that cannot be recovered stays unknown: later frames
	// may not need it.
	if fp, err := recover(row.FP, arch.FP()); err == nil {
		c.Caller.Set(arch.FP(), fp)
	}
	return nil
}
