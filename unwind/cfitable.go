package unwind

import (
	"fmt"

	"github.com/rewindstack/rewind/cfi"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/unwindtable"
)

// CFITable unwinds with the module's compiled DWARF CFI table
// (unwindtable), built once per object from .eh_frame and .debug_frame.
type CFITable struct{}

// Method implements Stepper.
func (CFITable) Method() Method { return MethodDWARF }

// Step implements Stepper.
func (CFITable) Step(c *Cursor) error {
	if c.Map == nil || c.Map.Module == nil {
		return ErrNoInfo
	}
	t, err := c.Map.Module.Table()
	if err != nil || t == nil {
		return ErrNoInfo
	}
	var rule *unwindtable.Rule
	var ok bool
	if c.rules != nil {
		rule, ok = c.rules.lookup(t, c.PC-c.Map.Bias)
	} else {
		rule, ok = t.Lookup(c.PC - c.Map.Bias)
	}
	if !ok {
		return ErrNoInfo
	}
	if rule.Flags&unwindtable.FlagSignal != 0 && c.Regs.Arch == regs.AMD64 {
		c.Method = MethodSignal
		return restoreSignalFrame(c)
	}
	return ApplyRule(c, t, rule)
}

// A profile's walks step through the same few return addresses again and
// again: a table lookup (a binary search among a page's rows) was a tenth
// of walking a perf.data file's samples. Each pooled walk state remembers
// the rules it looked up, by table and address.

// ruleCacheSize is the number of lookups a walk state remembers (a power
// of two).
const ruleCacheSize = 1024

// ruleCache is a direct-mapped cache of table lookups. It keeps the
// tables it names alive (so an address cannot name a new table), as long
// as its walk state stays in the pool (which a collection empties).
type ruleCache struct {
	e [ruleCacheSize]struct {
		t    *unwindtable.Table
		pc   uint64
		rule *unwindtable.Rule
		ok   bool
	}
}

// lookup is t.Lookup(pc), remembered.
func (rc *ruleCache) lookup(t *unwindtable.Table, pc uint64) (*unwindtable.Rule, bool) {
	e := &rc.e[(pc^pc>>10^pc>>20)&(ruleCacheSize-1)]
	if e.t == t && e.pc == pc {
		return e.rule, e.ok
	}
	rule, ok := t.Lookup(pc)
	e.t, e.pc, e.rule, e.ok = t, pc, rule, ok
	return rule, ok
}

// ApplyRule computes the caller's registers from a table rule.
func ApplyRule(c *Cursor, t *unwindtable.Table, rule *unwindtable.Rule) error {
	arch := c.Regs.Arch
	reg := func(n int) (uint64, error) {
		v, ok := c.get(n)
		if !ok {
			return 0, fmt.Errorf("%w: %s", ErrRegister, arch.RegName(n))
		}
		return v, nil
	}
	var cfa uint64
	var err error
	switch rule.CFABase {
	case unwindtable.CFASP:
		cfa, err = reg(arch.SP())
		cfa += uint64(int64(rule.CFAOffset))
	case unwindtable.CFAFP:
		cfa, err = reg(arch.FP())
		cfa += uint64(int64(rule.CFAOffset))
	case unwindtable.CFAReg:
		cfa, err = reg(int(rule.CFAReg))
		cfa += uint64(int64(rule.CFAOffset))
	case unwindtable.CFARegDeref:
		var base uint64
		if base, err = reg(int(rule.CFAReg)); err == nil {
			cfa, err = c.mem.u64(base + uint64(int64(rule.CFAOffset)))
		}
	case unwindtable.CFAPLT:
		var pc uint64
		if cfa, err = reg(arch.SP()); err == nil {
			if pc, err = reg(arch.PC()); err == nil {
				cfa += uint64(int64(rule.CFAOffset))
				if pc&15 >= uint64(rule.CFAReg) {
					cfa += 8
				}
			}
		}
	case unwindtable.CFAExpr:
		cfa, err = cfi.EvalExpr(t.Expr(rule.CFAOffset), exprContext{c}, 8)
	default:
		return ErrNoInfo
	}
	if err != nil {
		return err
	}
	if rule.RAKind == unwindtable.RegUndefined {
		return ErrOutermost
	}
	ra, err := recoverReg(c, t, rule.RAKind, rule.RAReg, rule.RAOffset, cfa, arch.RA())
	if err != nil {
		return err
	}
	*c.Caller = regs.New(arch)
	c.Caller.Set(arch.SP(), cfa)
	c.Caller.Set(arch.PC(), stripPAC(arch, ra))
	if rule.FPKind != unwindtable.RegUndefined {
		// A frame pointer that cannot be recovered stays unknown: later
		// frames may not need it.
		if fp, err := recoverReg(c, t, rule.FPKind, rule.FPReg, rule.FPOffset, cfa, arch.FP()); err == nil {
			c.Caller.Set(arch.FP(), fp)
		}
	}
	return nil
}

// recoverReg computes the caller's value of register self under one rule.
func recoverReg(c *Cursor, t *unwindtable.Table, kind unwindtable.RegKind, src uint8, off int32, cfa uint64, self int) (uint64, error) {
	switch kind {
	case unwindtable.RegSame:
		get := c.get
		if self == c.Regs.Arch.FP() {
			get = c.passed // the frame pointer's value goes to the caller's
		}
		if v, ok := get(self); ok {
			return v, nil
		}
		return 0, fmt.Errorf("%w: %s", ErrRegister, c.Regs.Arch.RegName(self))
	case unwindtable.RegAtCFA:
		return c.mem.u64(cfa + uint64(int64(off)))
	case unwindtable.RegValCFA:
		return cfa + uint64(int64(off)), nil
	case unwindtable.RegInReg:
		if v, ok := c.get(int(src)); ok {
			return v, nil
		}
		return 0, fmt.Errorf("%w: %s", ErrRegister, c.Regs.Arch.RegName(int(src)))
	case unwindtable.RegExpr:
		addr, err := cfi.EvalExpr(t.Expr(off), exprContext{c}, 8, cfa)
		if err != nil {
			return 0, err
		}
		return c.mem.u64(addr)
	case unwindtable.RegValExpr:
		return cfi.EvalExpr(t.Expr(off), exprContext{c}, 8, cfa)
	}
	return 0, ErrOutermost
}

// exprContext lets DWARF expressions read the frame's registers and memory.
type exprContext struct{ c *Cursor }

func (e exprContext) Reg(n int) (uint64, bool) { return e.c.get(n) }

func (e exprContext) ReadMemory(addr uint64, p []byte) error {
	if err := e.c.mem.read(addr, p); err != nil {
		return asMemoryError(addr, err)
	}
	return nil
}
