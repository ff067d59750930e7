package bpfunwind

import (
	"sort"

	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/symbolize"
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

	RegSame      = 0
	RegUndefined = 1
	RegAtCFA     = 2

	RowRoot  = 1 // a thread's entry function: its frame is the last
	RowGoTop = 2 // a Go top frame (runtime.goexit, runtime.mstart): the last frame
)

// Row is one unwind rule from PC on, in a file's own addresses, in the
// layout of the BPF program's struct row (24 bytes).
type Row struct {
	PC     uint64
	CFAOff int32
	RAOff  int32
	FPOff  int32
	CFA    uint8
	RA     uint8
	FP     uint8
	Flags  uint8 // Row* flags; for CFAPLT the threshold in the high nibble
}

// DWARF numbers of the x86-64 stack and frame pointers.
const (
	dwarfSP = 7
	dwarfFP = 6
)

// CompileRows turns a file's unwind table into rows the BPF walk applies,
// marking the extents of its thread-root functions. Rows are sorted by PC
// and merged where consecutive rows are equal; a row of kind CFANone
// starts a gap. Only x86-64 tables are compiled (nil for others).
func CompileRows(t *unwindtable.Table, roots []symbolize.RootRange) []Row {
	if t == nil || t.Arch() != regs.AMD64 {
		return nil
	}
	var rows []Row
	t.Rows(func(start, end uint64, r *unwindtable.Rule) {
		row := convert(r)
		row.PC = start
		if n := len(rows); n > 0 && rows[n-1].PC == start {
			rows[n-1] = row
		} else {
			rows = append(rows, row)
		}
		gap := Row{PC: end}
		rows = append(rows, gap) // replaced by the next row when it starts here
	})
	rows = markRoots(rows, roots)
	return merge(rows)
}

func convert(r *unwindtable.Rule) Row {
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
	default:
		out.CFA = CFAUnsupported
	}
	return out
}

// markRoots splits rows at the root functions' extents and flags the rows
// inside them.
func markRoots(rows []Row, roots []symbolize.RootRange) []Row {
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
	var extra []Row
	for _, rr := range roots {
		extra = append(extra, rule(rr.Start), rule(rr.End))
	}
	rows = append(rows, extra...)
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].PC < rows[j].PC })
	for i := range rows {
		for _, rr := range roots {
			if rows[i].PC >= rr.Start && rows[i].PC < rr.End {
				if rr.Kind == symbolize.GoTopFrame {
					rows[i].Flags |= RowGoTop
				} else {
					rows[i].Flags |= RowRoot
				}
			}
		}
	}
	return rows
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
