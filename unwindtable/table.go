// Package unwindtable compiles an object's DWARF call frame information
// (.eh_frame and .debug_frame) into one compact table sorted by PC, so that
// unwinding a frame is a short binary search and a few arithmetic operations
// instead of re-running CFA programs.
//
// Layout. Every distinct rule (CFA computation, return-address rule,
// frame-pointer rule, flags) is stored once in a rules array of 16-byte Rule
// values. A row is 4 bytes: the low 16 bits of its start address (relative
// to the table base) and a 16-bit index into the rules. Rows are grouped in
// 64 KiB pages; a page index (4 bytes per page) gives the first row of each
// page, so a lookup is one array access plus a binary search within a page.
// Consecutive rows with the same rule are merged, and gaps between FDEs are
// explicit "no information" rows. Tables with more than 65535 distinct rules
// switch to 32-bit rule indexes (6 bytes per row).
//
// Registers other than the stack pointer, frame pointer and return address
// are not tracked (as in framehop and the OpenTelemetry profiler): their
// rules never affect which frames a walk finds on x86-64 or arm64 Linux code,
// with the documented exception of signal frames, which the unwinder restores
// from the saved ucontext instead.
package unwindtable

import (
	"fmt"
	"sort"

	"github.com/rewindstack/rewind/cfi"
	"github.com/rewindstack/rewind/regs"
)

const pageBits = 16

// Table is the compiled unwind information of one object, in the object's
// own virtual addresses (subtract the load bias before looking up).
type Table struct {
	arch  regs.Arch
	base  uint64   // address of the first row
	end   uint64   // end of the last row
	pages []uint32 // pages[p] = index of the first row whose page >= p
	lo    []uint16 // row start, low 16 bits of (start - base)
	idx16 []uint16 // rule index per row (nil when idx32 is used)
	idx32 []uint32
	rules []Rule // rules[0] is the "no information" rule
	exprs [][]byte
	stats Stats
	lazy  *partial // set for a table compiled as it is looked into
}

// Stats describes a compiled table.
type Stats struct {
	FDEs        int // FDEs compiled
	BadFDEs     int // FDEs skipped because their CFA program was invalid
	SourceRows  int // CFA rows produced by all FDEs, before merging
	Rows        int // rows in the table (merged, including gap rows)
	Rules       int // distinct rules
	Exprs       int // distinct DWARF expressions kept for unwind time
	Unsupported int // source rows that cannot be represented (treated as no information)
	FirstError  string
}

// Arch returns the architecture the table was compiled for.
func (t *Table) Arch() regs.Arch { return t.arch }

// Stats returns counts describing the table.
func (t *Table) Stats() Stats {
	if t.lazy != nil {
		return t.lazy.snapshot().stats
	}
	return t.stats
}

// Bytes returns the memory the table's lookup structures occupy: rows, page
// index, rules and expressions.
func (t *Table) Bytes() int {
	if t.lazy != nil {
		return t.lazy.snapshot().Bytes()
	}
	n := len(t.pages)*4 + len(t.lo)*2 + len(t.idx16)*2 + len(t.idx32)*4 + len(t.rules)*16
	for _, e := range t.exprs {
		n += len(e) + 24
	}
	return n
}

// Expr returns the DWARF expression with index i (from a Rule whose kind is
// an expression kind).
func (t *Table) Expr(i int32) []byte {
	if t.lazy != nil {
		return t.lazy.expr(i)
	}
	if i < 0 || int(i) >= len(t.exprs) {
		return nil
	}
	return t.exprs[i]
}

func (t *Table) ruleIndex(i int) uint32 {
	if t.idx16 != nil {
		return uint32(t.idx16[i])
	}
	return t.idx32[i]
}

// Lookup returns the rule covering pc (an address in the object's own
// address space). ok is false where the object has no unwind information.
func (t *Table) Lookup(pc uint64) (r *Rule, ok bool) {
	if t.lazy != nil {
		return t.lazy.lookup(pc)
	}
	if pc < t.base || pc >= t.end {
		return nil, false
	}
	off := pc - t.base
	p := off >> pageBits
	key := uint16(off)
	lo, hi := int(t.pages[p]), int(t.pages[p+1])
	// Find the first row in [lo, hi) that starts after key.
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if t.lo[m] <= key {
			lo = m + 1
		} else {
			hi = m
		}
	}
	// The covering row is the one before it; when the page has no row at
	// or before key, that is the last row of an earlier page.
	i := lo - 1
	if i < 0 {
		return nil, false
	}
	r = &t.rules[t.ruleIndex(i)]
	if r.CFABase == CFANone {
		return nil, false
	}
	return r, true
}

// Rows calls fn for every row of the table in address order, including gap
// rows (whose rule has CFABase CFANone).
func (t *Table) Rows(fn func(start, end uint64, r *Rule)) {
	if t.lazy != nil {
		t.lazy.snapshot().Rows(fn)
		return
	}
	n := len(t.lo)
	p := 0
	for i := 0; i < n; i++ {
		for int(t.pages[p+1]) <= i {
			p++
		}
		start := t.base + uint64(p)<<pageBits + uint64(t.lo[i])
		end := t.end
		if i+1 < n {
			q := p
			for int(t.pages[q+1]) <= i+1 {
				q++
			}
			end = t.base + uint64(q)<<pageBits + uint64(t.lo[i+1])
		}
		fn(start, end, &t.rules[t.ruleIndex(i)])
	}
}

type row struct {
	start, end uint64
	rule       uint32
}

type fdeRef struct {
	fde  *cfi.FDE
	prio int // lower wins when FDEs of different sections overlap
}

// builder accumulates rows and deduplicated rules.
type builder struct {
	arch    regs.Arch
	rules   []Rule
	ruleIdx map[Rule]uint32
	exprs   [][]byte
	exprIdx map[string]int32
	rows    []row
	stats   Stats
	// recent remembers rules by a hash of their offsets, in front of
	// ruleIdx: hashing every row's 20-byte rule for the map was a sixth
	// of building libc's table (28,000 rows, 304 rules).
	recent [256]recentRule
}

type recentRule struct {
	r  Rule
	i  uint32
	ok bool
}

// Build compiles the CFI sections of one object (typically .eh_frame, then
// .debug_frame) into a table. Where FDEs of several sections overlap, the
// earlier section wins. An FDE whose CFA program is invalid is skipped and
// counted in Stats; a section that cannot be parsed at all is an error.
func Build(arch regs.Arch, sections ...*cfi.Section) (*Table, error) {
	b := &builder{
		arch:    arch,
		ruleIdx: map[Rule]uint32{},
		exprIdx: map[string]int32{},
	}
	b.rule(Rule{}) // index 0: no information
	var all []fdeRef
	for prio, sec := range sections {
		if sec == nil || len(sec.Data) == 0 {
			continue
		}
		fdes, err := cfi.Parse(sec)
		if err != nil {
			return nil, err
		}
		for _, f := range fdes {
			if f.End > f.Start {
				all = append(all, fdeRef{f, prio})
			}
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].fde.Start != all[j].fde.Start {
			return all[i].fde.Start < all[j].fde.Start
		}
		return all[i].prio < all[j].prio
	})
	// The rows, allocated once: growing them by append copied them into
	// fresh memory time after time, a fifth of the time `rewind table`
	// took for libc (its page faults above all). An FDE makes about one
	// row per four bytes of instructions, and a gap row (libc: 30,774
	// estimated, 28,274 made; one row fewer per FDE fell short).
	est := 0
	for _, ref := range all {
		est += 3 + len(ref.fde.Instructions)/4
	}
	b.rows = make([]row, 0, est)
	raCol := arch.RA()
	for _, ref := range all {
		f := ref.fde
		if int(f.CIE.RAReg) != raCol {
			// A CIE with an unusual return address column (hand-written
			// assembly); follow it rather than the ABI's.
			if f.CIE.RAReg >= regs.MaxRegs {
				b.bad(fmt.Errorf("FDE at %#x: return address column %d not supported", f.Offset, f.CIE.RAReg))
				continue
			}
		}
		mark := len(b.rows)
		err := f.Rows(func(r *cfi.Row) error {
			b.stats.SourceRows++
			b.add(r.Start, r.End, b.rule(b.convert(f, r)))
			return nil
		})
		if err != nil {
			b.rows = b.rows[:mark]
			b.bad(err)
			continue
		}
		b.stats.FDEs++
	}
	return b.finish()
}

func (b *builder) bad(err error) {
	b.stats.BadFDEs++
	if b.stats.FirstError == "" {
		b.stats.FirstError = err.Error()
	}
}

// add appends the row [start, end) with rule index ri, clipping it against
// what earlier FDEs cover, inserting gap rows and merging equal neighbours.
func (b *builder) add(start, end uint64, ri uint32) {
	if n := len(b.rows); n > 0 {
		last := &b.rows[n-1]
		if start < last.end {
			start = last.end // overlap: the earlier FDE wins
		}
		if start >= end {
			return
		}
		if start > last.end {
			if last.rule == 0 {
				last.end = start
			} else {
				b.rows = append(b.rows, row{last.end, start, 0})
			}
			last = &b.rows[len(b.rows)-1]
		}
		if last.rule == ri {
			last.end = end
			return
		}
	}
	b.rows = append(b.rows, row{start, end, ri})
}

func (b *builder) rule(r Rule) uint32 {
	h := (uint32(r.CFAOffset)*0x9e3779b1 ^ uint32(r.RAOffset)*0x85ebca77 ^ uint32(r.FPOffset)*0xc2b2ae3d ^
		uint32(r.CFABase)<<8 ^ uint32(r.FPKind)<<12 ^ uint32(r.RAKind)<<16 ^ uint32(r.CFAReg)<<20 ^ uint32(r.Flags)<<24) >> 24
	c := &b.recent[h]
	if c.ok && c.r == r {
		return c.i
	}
	i, ok := b.ruleIdx[r]
	if !ok {
		i = uint32(len(b.rules))
		b.rules = append(b.rules, r)
		b.ruleIdx[r] = i
	}
	*c = recentRule{r, i, true}
	return i
}

func (b *builder) expr(e []byte) int32 {
	if i, ok := b.exprIdx[string(e)]; ok {
		return i
	}
	i := int32(len(b.exprs))
	b.exprs = append(b.exprs, append([]byte(nil), e...))
	b.exprIdx[string(e)] = i
	return i
}

func fits32(v int64) bool { return v >= -1<<31 && v < 1<<31 }

// convert translates a CFI row into a Rule. Rows that cannot be represented
// become the "no information" rule and are counted.
func (b *builder) convert(f *cfi.FDE, r *cfi.Row) Rule {
	var out Rule
	sp, fp := b.arch.SP(), b.arch.FP()
	switch r.CFA.Kind {
	case cfi.CFARegOffset:
		if !fits32(r.CFA.Offset) || r.CFA.Reg >= regs.MaxRegs {
			b.stats.Unsupported++
			return Rule{}
		}
		out.CFAOffset = int32(r.CFA.Offset)
		switch int(r.CFA.Reg) {
		case sp:
			out.CFABase = CFASP
		case fp:
			out.CFABase = CFAFP
		default:
			out.CFABase = CFAReg
			out.CFAReg = uint8(r.CFA.Reg)
		}
	case cfi.CFAExpression:
		if off, thr, ok := cfi.MatchPLT(r.CFA.Expr); ok && fits32(off) && b.arch == regs.AMD64 {
			out.CFABase, out.CFAOffset, out.CFAReg = CFAPLT, int32(off), thr
		} else if reg, off, deref, ok := cfi.MatchBreg(r.CFA.Expr); ok && fits32(off) && reg < regs.MaxRegs {
			out.CFAOffset = int32(off)
			out.CFAReg = uint8(reg)
			switch {
			case deref:
				out.CFABase = CFARegDeref
			case int(reg) == sp:
				out.CFABase, out.CFAReg = CFASP, 0
			case int(reg) == fp:
				out.CFABase, out.CFAReg = CFAFP, 0
			default:
				out.CFABase = CFAReg
			}
		} else {
			out.CFABase = CFAExpr
			out.CFAOffset = b.expr(r.CFA.Expr)
		}
	default:
		b.stats.Unsupported++
		return Rule{}
	}
	var ok1, ok2 bool
	out.RAKind, out.RAReg, out.RAOffset, ok1 = b.regRule(r.Regs[f.CIE.RAReg])
	out.FPKind, out.FPReg, out.FPOffset, ok2 = b.regRule(r.Regs[fp])
	if !ok1 || !ok2 {
		b.stats.Unsupported++
		return Rule{}
	}
	if f.CIE.SignalFrame {
		out.Flags |= FlagSignal
	}
	if r.RASigned {
		out.Flags |= FlagRASigned
	}
	return out
}

func (b *builder) regRule(r cfi.Rule) (RegKind, uint8, int32, bool) {
	switch r.Kind {
	case cfi.RuleSameValue:
		return RegSame, 0, 0, true
	case cfi.RuleUndefined:
		return RegUndefined, 0, 0, true
	case cfi.RuleOffset:
		return RegAtCFA, 0, int32(r.Offset), fits32(r.Offset)
	case cfi.RuleValOffset:
		return RegValCFA, 0, int32(r.Offset), fits32(r.Offset)
	case cfi.RuleRegister:
		return RegInReg, uint8(r.Reg), 0, r.Reg < regs.MaxRegs
	case cfi.RuleExpression:
		return RegExpr, 0, b.expr(r.Expr), true
	case cfi.RuleValExpression:
		return RegValExpr, 0, b.expr(r.Expr), true
	}
	return 0, 0, 0, false
}

func (b *builder) finish() (*Table, error) {
	t := &Table{arch: b.arch, rules: b.rules, exprs: b.exprs, stats: b.stats}
	rows := b.rows
	if len(rows) == 0 {
		t.pages = []uint32{0, 0}
		t.idx16 = []uint16{}
		t.fillStats()
		return t, nil
	}
	t.base = rows[0].start
	t.end = rows[len(rows)-1].end
	span := t.end - t.base
	if span>>40 != 0 {
		return nil, fmt.Errorf("unwindtable: CFI covers %#x..%#x, a span too large to index", t.base, t.end)
	}
	npages := int(span>>pageBits) + 1
	t.pages = make([]uint32, npages+1)
	t.lo = make([]uint16, len(rows))
	wide := len(b.rules) > 1<<16
	if wide {
		t.idx32 = make([]uint32, len(rows))
	} else {
		t.idx16 = make([]uint16, len(rows))
	}
	p := 0
	for i, r := range rows {
		off := r.start - t.base
		for p < int(off>>pageBits) {
			p++
			t.pages[p] = uint32(i)
		}
		t.lo[i] = uint16(off)
		if wide {
			t.idx32[i] = r.rule
		} else {
			t.idx16[i] = uint16(r.rule)
		}
	}
	for p < npages {
		p++
		t.pages[p] = uint32(len(rows))
	}
	t.fillStats()
	return t, nil
}

func (t *Table) fillStats() {
	t.stats.Rows = len(t.lo)
	t.stats.Rules = len(t.rules)
	t.stats.Exprs = len(t.exprs)
}
