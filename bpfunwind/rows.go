package bpfunwind

import (
	"sort"

	"github.com/rewindstack/rewind/internal/goruntime"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwindtable"
)

// Rule kinds of a Row, as bpf/unwind.bpf.c applies them.
const (
	CFANone        = 0 // no row: the walk falls back to frame pointers
	CFASP          = 1 // CFA = SP + CFAOffset
	CFAFP          = 2 // CFA = FP + CFAOffset
	CFAPLT         = 3 // CFA = SP + CFAOffset (+8 past the PLT threshold)
	CFASignal      = 4 // the kernel's rt_sigreturn frame: restored from the ucontext at SP
	CFAUnsupported = 5 // a rule the BPF walk cannot apply: the walk ends there
	CFADerefFP     = 6 // CFA = *(FP + CFAOffset): GCC's stack realignment (DRAP) body
	CFAReg         = 7 // CFA = r10 or r13 (in the flags' high nibble) + CFAOffset: DRAP's prologue, in the leaf frame only

	RegSame      = 0
	RegUndefined = 1
	RegAtCFA     = 2
	RegAtFP      = 3 // saved at FP + offset (the callee's FP): DRAP's frame pointer

	RowRoot   = 1 // a thread's entry function: its frame is the last
	RowGoTop  = 2 // a Go top frame (runtime.goexit, runtime.mstart): the last frame
	RowGoFP   = 4 // a Go stack switch: the walk follows the frame pointer from it
	RowSignal = 8 // a signal restorer whose CFI does not say so: the kernel's signal frame is at SP
)

// Mark flags the rows of one function's extent (in the file's own
// addresses).
type Mark struct {
	Start, End uint64
	Flags      uint8 // Row* flags
}

// goSwitchFlags are how the walk treats the Go runtime's functions that
// move between a goroutine's stack and g0's (internal/goruntime's
// Switches): their CFI describes the stack they were entered on, while
// the frame pointer leads back across the switch (as package unwind's
// goSwitch explains), or, from runtime.morestack and runtime.systemstack
// on g0, the goroutine's g (the BPF program's go_jump, with GoInfo's
// offsets). runtime.mcall leaves its goroutine for good: the walk ends
// there, as the runtime's traceback of g0 does; it ends at
// runtime.morestack too where go_jump does not cross.
var goSwitchFlags = map[goruntime.SwitchKind]uint8{
	goruntime.Systemstack: RowGoFP, goruntime.Morestack: RowGoTop, goruntime.FPSwitch: RowGoFP,
	goruntime.Mcall: RowGoTop, goruntime.Clone: RowRoot, goruntime.Sigreturn: RowSignal,
}

// Marks returns the marks of a module: its thread roots, Go top frames and
// Go stack switches.
func Marks(mod *target.Module) []Mark {
	var out []Mark
	for _, r := range goruntime.RootRanges(mod) {
		f := uint8(RowRoot)
		if r.Kind == goruntime.GoTopFrame {
			f = RowGoTop
		}
		out = append(out, Mark{r.Start, r.End, f})
	}
	if mod != nil && mod.File != nil && mod.File.Go {
		for _, sw := range goruntime.Switches {
			f := goSwitchFlags[sw.Kind]
			for _, n := range sw.Names() {
				if lo, hi, ok := mod.File.SymbolExtent(n); ok && hi > lo {
					if f == RowSignal && lo > 0 {
						// The kernel plants the restorer's first
						// byte as the return address; the walk
						// looks up the byte before it.
						lo--
					}
					out = append(out, Mark{lo, hi, f})
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// Row is one unwind rule from PC on, in a file's own addresses; the rows map
// holds it as the BPF program's struct row and struct rule (rules.go).
type Row struct {
	PC     uint64
	CFAOff int32
	RAOff  int32
	FPOff  int32
	CFA    uint8
	RA     uint8
	FP     uint8
	Flags  uint8 // Row* flags; the high nibble: CFAPLT's threshold, CFAReg's register
}

// DWARF numbers of the x86-64 stack and frame pointers.
const (
	dwarfSP = 7
	dwarfFP = 6
	// GCC's DRAP registers: r10, or r13 where r10 is taken.
	dwarfR10 = 10
	dwarfR13 = 13
)

// CompileRows turns a file's unwind table into rows the BPF walk applies,
// marking the extents of its thread-root functions. Rows are sorted by PC
// and merged where consecutive rows are equal; a row of kind CFANone
// starts a gap. Only x86-64 tables are compiled (nil for others).
func CompileRows(t *unwindtable.Table, marks []Mark) []Row {
	if t == nil || t.Arch() != regs.AMD64 {
		return nil
	}
	// Sized once: a large file (a compiler, a browser) has a million rows,
	// and growing the slice row by row cost more than compiling them.
	rows := make([]Row, 0, t.Stats().Rows+1) // (markRows makes its own)
	var end uint64                           // where the last row ends
	t.Rows(func(start, stop uint64, r *unwindtable.Rule) {
		row := convert(t, r)
		row.PC = start
		n := len(rows)
		switch {
		case n > 0 && end != start:
			rows = append(rows, Row{PC: end}) // a gap between them
		case n > 0 && rows[n-1].PC == start:
			rows[n-1] = row
			end = stop
			return
		case n > 0 && sameRule(rows[n-1], row):
			end = stop
			return
		}
		rows = append(rows, row)
		end = stop
	})
	if len(rows) > 0 {
		rows = append(rows, Row{PC: end})
	}
	rows = markRows(rows, marks)
	return merge(rows)
}

// convert compiles one rule. Beside the rules of registers and offsets,
// two DWARF-expression patterns are compiled: x86-64 PLT stubs (the table
// reads them as CFAPLT) and GCC's stack realignment through a DRAP
// register (-mstackrealign, over-aligned locals with alloca), whose body
// has CFA = *(rbp - 8) and the caller's rbp saved at rbp + 0 (DW_CFA_expression
// DW_OP_breg6 0), and whose prologue and epilogue have CFA = r10 (or r13),
// which the walk knows in the sampled frame only. Any other expression
// ends the walk (CFAUnsupported).
func convert(t *unwindtable.Table, r *unwindtable.Rule) Row {
	var out Row
	switch {
	case r.CFABase == unwindtable.CFANone:
		return out
	case r.Flags&unwindtable.FlagSignal != 0:
		out.CFA = CFASignal
		return out
	case r.CFABase == unwindtable.CFASP:
		out.CFA = CFASP
	case r.CFABase == unwindtable.CFAFP:
		out.CFA = CFAFP
	case r.CFABase == unwindtable.CFAReg && r.CFAReg == dwarfSP:
		out.CFA = CFASP
	case r.CFABase == unwindtable.CFAReg && r.CFAReg == dwarfFP:
		out.CFA = CFAFP
	case r.CFABase == unwindtable.CFAPLT && r.CFAReg < 16:
		out.CFA = CFAPLT
		out.Flags = r.CFAReg << 4
	case r.CFABase == unwindtable.CFAReg && (r.CFAReg == dwarfR10 || r.CFAReg == dwarfR13):
		out.CFA = CFAReg
		out.Flags = r.CFAReg << 4
	case r.CFABase == unwindtable.CFARegDeref && r.CFAReg == dwarfFP:
		out.CFA = CFADerefFP
	default:
		out.CFA = CFAUnsupported
		return out
	}
	out.CFAOff = r.CFAOffset
	switch r.RAKind {
	case unwindtable.RegAtCFA:
		out.RA, out.RAOff = RegAtCFA, r.RAOffset
	case unwindtable.RegUndefined:
		out.RA = RegUndefined
	default:
		out.CFA = CFAUnsupported
	}
	switch r.FPKind {
	case unwindtable.RegSame:
	case unwindtable.RegAtCFA:
		out.FP, out.FPOff = RegAtCFA, r.FPOffset
	case unwindtable.RegExpr:
		if off, ok := bregFP(t.Expr(r.FPOffset)); ok {
			out.FP, out.FPOff = RegAtFP, off
			break
		}
		out.CFA = CFAUnsupported
	default:
		out.CFA = CFAUnsupported
	}
	return out
}

// bregFP matches the expression DW_OP_breg6 (rbp) N: an address FP + N.
func bregFP(e []byte) (int32, bool) {
	if len(e) < 2 || e[0] != 0x70+dwarfFP {
		return 0, false
	}
	var v int64
	var shift uint
	for i, b := range e[1:] {
		if shift > 56 {
			return 0, false
		}
		v |= int64(b&0x7f) << shift
		shift += 7
		if b&0x80 == 0 {
			if i+2 != len(e) {
				return 0, false // more operations follow
			}
			if shift < 64 && b&0x40 != 0 {
				v |= -1 << shift
			}
			if v < -1<<31 || v >= 1<<31 {
				return 0, false
			}
			return int32(v), true
		}
	}
	return 0, false
}

// markRows splits rows (sorted by PC) at the marked functions' extents
// and flags the rows inside them.
func markRows(rows []Row, roots []Mark) []Row {
	if len(roots) == 0 {
		return rows
	}
	rule := func(pc uint64) Row {
		i := sort.Search(len(rows), func(i int) bool { return rows[i].PC > pc })
		if i == 0 {
			return Row{PC: pc}
		}
		r := rows[i-1]
		r.PC = pc
		return r
	}
	extra := make([]Row, 0, 2*len(roots))
	for _, rr := range roots {
		extra = append(extra, rule(rr.Start), rule(rr.End))
	}
	sort.SliceStable(extra, func(i, j int) bool { return extra[i].PC < extra[j].PC })
	// Merged in order, the rows before the split rows of the same PC.
	out := make([]Row, 0, len(rows)+len(extra))
	i, j := 0, 0
	for i < len(rows) || j < len(extra) {
		if j == len(extra) || i < len(rows) && rows[i].PC <= extra[j].PC {
			out = append(out, rows[i])
			i++
		} else {
			out = append(out, extra[j])
			j++
		}
	}
	for _, rr := range roots {
		k := sort.Search(len(out), func(k int) bool { return out[k].PC >= rr.Start })
		for ; k < len(out) && out[k].PC < rr.End; k++ {
			out[k].Flags |= rr.Flags
		}
	}
	return out
}

// merge keeps, of rows starting at the same PC, the last, and drops rows
// equal to the one before them.
func merge(rows []Row) []Row {
	out := rows[:0]
	for _, r := range rows {
		n := len(out)
		if n > 0 && out[n-1].PC == r.PC {
			out[n-1] = r
			continue
		}
		if n > 0 && sameRule(out[n-1], r) {
			continue
		}
		out = append(out, r)
	}
	return out
}

func sameRule(a, b Row) bool {
	a.PC, b.PC = 0, 0
	return a == b
}

// Lookup returns the row covering pc in sorted rows, as the BPF program
// finds it, and whether there is one.
func Lookup(rows []Row, pc uint64) (Row, bool) {
	i := sort.Search(len(rows), func(i int) bool { return rows[i].PC > pc })
	if i == 0 {
		return Row{}, false
	}
	return rows[i-1], true
}
