package sframe

import (
	"errors"
	"fmt"
	"sync"

	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/unwind"
)

// Stepper unwinds with a module's .sframe section. It implements
// unwind.Stepper; put it before unwind.CFITable to prefer SFrame where an
// object has it and fall back to CFI (and frame pointers) where it does
// not:
//
//	u := &unwind.Unwinder{Steppers: []unwind.Stepper{
//		sframe.Stepper{}, unwind.CFITable{}, unwind.FramePointers{}}}
//
// For each frame it looks up the PC (c.PC, the lookup address: the return
// address minus one for callers) minus the mapping's load bias in the
// module's section, then computes CFA = SP or FP + offset, RA = the word
// at CFA + RA offset (AMD64: the header's fixed -8; AArch64: the link
// register when the row records no RA, which is only known in frame 0),
// and FP = the word at CFA + FP offset, or unchanged.
//
// It returns unwind.ErrNoInfo (so the next stepper runs) when the PC is not
// in a module with a usable .sframe, when no FDE covers it, and for signal
// trampolines (version 3 FDEs marked as signal frames): SFrame cannot
// describe the kernel's signal frame, and unwind.CFITable and
// unwind.FramePointers restore the interrupted context from it (the latter
// recognises __restore_rt by its code, as eu-stack does). A row whose RA
// is undefined ends the walk with unwind.ErrOutermost. s390x sections are
// never used (rewind does not unwind s390x).
type Stepper struct {
	// Cache holds the parsed sections; nil means a package-wide cache.
	Cache *Cache
	// Source, when set, supplies each module's section instead of the
	// module's own .sframe (one generated from its CFI, for example); it
	// returns nil and no error for a module without one. It must be safe
	// for concurrent use. Cache is not used then.
	Source func(mod *unwind.Module) (*Section, error)
}

// Method implements unwind.Stepper.
func (Stepper) Method() unwind.Method { return unwind.MethodSFrame }

var defaultCache Cache

// Cache parses each module's .sframe once. It keeps modules reachable for
// its own lifetime; give a Stepper its own Cache to scope that.
type Cache struct {
	m sync.Map // *unwind.Module -> *cacheEntry
}

type cacheEntry struct {
	once sync.Once
	sec  *Section
	err  error
}

// Section returns the module's parsed .sframe section, nil (and no error)
// when it has none.
func (c *Cache) Section(mod *unwind.Module) (*Section, error) {
	if mod == nil || mod.File == nil || mod.File.SFrame == nil {
		return nil, nil
	}
	v, ok := c.m.Load(mod)
	if !ok {
		v, _ = c.m.LoadOrStore(mod, &cacheEntry{})
	}
	e := v.(*cacheEntry)
	e.once.Do(func() {
		s := mod.File.SFrame
		data, err := s.Load()
		if err != nil {
			e.err = err
			return
		}
		e.sec, e.err = Parse(data, s.Addr, mod.Path+" "+s.Name)
	})
	return e.sec, e.err
}

// archOK reports whether a section's ABI is the register set's.
func archOK(abi ABI, arch regs.Arch) bool {
	switch arch {
	case regs.AMD64:
		return abi == ABIAMD64LE
	case regs.ARM64:
		return abi.IsAArch64()
	}
	return false
}

// ErrSignalFrame is wrapped (with unwind.ErrNoInfo) by the error Step
// returns for a signal trampoline.
var ErrSignalFrame = errors.New("sframe: signal frame left to the next stepper")

// Step implements unwind.Stepper.
func (st Stepper) Step(c *unwind.Cursor) error {
	if c.Map == nil || c.Map.Module == nil {
		return unwind.ErrNoInfo
	}
	var sec *Section
	var err error
	if st.Source != nil {
		sec, err = st.Source(c.Map.Module)
	} else {
		cache := st.Cache
		if cache == nil {
			cache = &defaultCache
		}
		sec, err = cache.Section(c.Map.Module)
	}
	if err != nil || sec == nil || !archOK(sec.Header.ABI, c.Regs.Arch) {
		return unwind.ErrNoInfo
	}
	row, ok := sec.Lookup(c.PC - c.Map.Bias)
	if !ok {
		return unwind.ErrNoInfo
	}
	if row.Signal {
		return fmt.Errorf("%w: %w", unwind.ErrNoInfo, ErrSignalFrame)
	}
	return Apply(c, row)
}

// Apply computes the caller's registers from a row: c.Caller gets the
// caller's PC, SP (the CFA) and, when known, FP.
func Apply(c *unwind.Cursor, row Row) error {
	arch := c.Regs.Arch
	if row.RA.Kind == RuleUndefined {
		return unwind.ErrOutermost
	}
	reg := func(n int) (uint64, error) {
		v, ok := c.Regs.Get(n)
		if !ok {
			return 0, fmt.Errorf("%w: %s", unwind.ErrRegister, arch.RegName(n))
		}
		return v, nil
	}
	var base int
	switch row.CFABase {
	case BaseSP:
		base = arch.SP()
	case BaseFP:
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
	recover := func(r Rule, self int) (uint64, error) {
		switch r.Kind {
		case RuleSame:
			return reg(self)
		case RuleAtCFA:
			return c.Read(cfa + uint64(int64(r.Offset)))
		case RuleValCFA:
			return cfa + uint64(int64(r.Offset)), nil
		case RuleReg:
			v, err := reg(int(r.Reg))
			return v + uint64(int64(r.Offset)), err
		case RuleAtReg:
			v, err := reg(int(r.Reg))
			if err != nil {
				return 0, err
			}
			return c.Read(v + uint64(int64(r.Offset)))
		}
		return 0, unwind.ErrOutermost
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
