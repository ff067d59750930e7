package unwindtable

import (
	"fmt"
	"sort"
	"sync"

	"github.com/rewindstack/rewind/cfi"
	"github.com/rewindstack/rewind/regs"
)

// A partial table compiles an object's CFI one FDE at a time, as lookups
// ask for addresses: the FDE covering a PC is found through
// .eh_frame_hdr's search table (as libgcc and elfutils find it) and only
// its rows are compiled. A dump walks a few dozen frames, so the first
// dump of a process using libc compiles about twenty of libc's 3,713
// FDEs instead of all of them (10 to 20 ms of CPU and 1.5 MB of fresh
// memory on a 2-core VM). What was compiled is kept in the cache as a
// partial table (see Cache.Lazy) and grown by later runs.

// partial is the state of a table built lazily (Table.lazy).
type partial struct {
	mu    sync.Mutex
	hdr   *cfi.EhFrameHdr
	eh    *cfi.Section
	b     builder       // interns rules and expressions; rows is scratch
	fdes  []compiledFDE // by start, not overlapping
	added bool          // FDEs compiled since the table was made or loaded
	none  map[uint64]bool
}

// compiledFDE is the rows of one FDE, covering [start, end).
type compiledFDE struct {
	start, end uint64
	rows       []row
}

// maxNoInfo bounds the addresses a partial table remembers having no FDE.
const maxNoInfo = 1024

// NewPartial returns a table for an object with a searchable
// .eh_frame_hdr (hdr) and .eh_frame (eh) and no other CFI, that compiles
// the FDE covering an address the first time Lookup is asked for one.
// Lookups may run concurrently. Rows and MarshalBinary see the FDEs
// compiled so far; MarshalPartial saves them for UnmarshalPartial.
func NewPartial(arch regs.Arch, hdr *cfi.EhFrameHdr, eh *cfi.Section) *Table {
	p := &partial{hdr: hdr, eh: eh}
	p.b = builder{arch: arch, ruleIdx: map[Rule]uint32{}, exprIdx: map[string]int32{}}
	p.b.rule(Rule{})
	return &Table{arch: arch, lazy: p}
}

// Partial reports whether t compiles its FDEs as lookups ask for them
// (see NewPartial).
func (t *Table) Partial() bool { return t.lazy != nil }

// Changed reports whether a partial table compiled FDEs since it was made
// or loaded (and so is worth saving again).
func (t *Table) Changed() bool {
	if t.lazy == nil {
		return false
	}
	t.lazy.mu.Lock()
	defer t.lazy.mu.Unlock()
	return t.lazy.added
}

// lookup is Lookup for a partial table.
func (p *partial) lookup(pc uint64) (*Rule, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := sort.Search(len(p.fdes), func(i int) bool { return p.fdes[i].end > pc })
	if i == len(p.fdes) || p.fdes[i].start > pc {
		if p.none[pc] || !p.compile(pc) {
			if len(p.none) < maxNoInfo {
				if p.none == nil {
					p.none = map[uint64]bool{}
				}
				p.none[pc] = true
			}
			return nil, false
		}
		i = sort.Search(len(p.fdes), func(i int) bool { return p.fdes[i].end > pc })
	}
	rows := p.fdes[i].rows
	j := sort.Search(len(rows), func(j int) bool { return rows[j].end > pc })
	if j == len(rows) || rows[j].start > pc || rows[j].rule == 0 {
		return nil, false
	}
	// Rules are never changed once interned: a pointer into the slice
	// stays right when a later append moves it.
	return &p.b.rules[rows[j].rule], true
}

// compile compiles the FDE covering pc, if there is one, and reports
// whether it did. Called with mu held.
func (p *partial) compile(pc uint64) bool {
	addr, ok := p.hdr.Lookup(pc)
	if !ok || addr < p.eh.Addr {
		return false
	}
	f, err := cfi.FDEAt(p.eh, addr-p.eh.Addr)
	if err != nil || pc < f.Start || pc >= f.End {
		return false
	}
	b := &p.b
	if int(f.CIE.RAReg) >= regs.MaxRegs {
		return false
	}
	b.rows = b.rows[:0]
	if err := f.Rows(func(r *cfi.Row) error {
		b.stats.SourceRows++
		b.add(r.Start, r.End, b.rule(b.convert(f, r)))
		return nil
	}); err != nil {
		b.bad(err)
		return false
	}
	b.stats.FDEs++
	c := compiledFDE{start: f.Start, end: f.End, rows: append([]row(nil), b.rows...)}
	return p.insert(c)
}

// insert adds c where it belongs. Where it overlaps FDEs compiled
// before (overlapping FDEs are a toolchain's mistake), those keep their
// addresses and c gets the rest, clipped into pieces.
func (p *partial) insert(c compiledFDE) bool {
	added := false
	lo := c.start
	for lo < c.end {
		i := sort.Search(len(p.fdes), func(i int) bool { return p.fdes[i].end > lo })
		if i < len(p.fdes) && p.fdes[i].start <= lo {
			lo = p.fdes[i].end // covered already
			continue
		}
		hi := c.end
		if i < len(p.fdes) && p.fdes[i].start < hi {
			hi = p.fdes[i].start
		}
		var rows []row
		for _, r := range c.rows {
			if r.end > lo && r.start < hi {
				rows = append(rows, row{max(r.start, lo), min(r.end, hi), r.rule})
			}
		}
		if len(rows) > 0 {
			p.fdes = append(p.fdes, compiledFDE{})
			copy(p.fdes[i+1:], p.fdes[i:])
			p.fdes[i] = compiledFDE{start: rows[0].start, end: rows[len(rows)-1].end, rows: rows}
			added = true
		}
		lo = hi
	}
	p.added = p.added || added
	return added
}

// expr is Expr for a partial table.
func (p *partial) expr(i int32) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i < 0 || int(i) >= len(p.b.exprs) {
		return nil
	}
	return p.b.exprs[i]
}

// snapshot returns a full table of the rows compiled so far (gaps between
// FDEs have no information), for Rows, Stats and MarshalBinary.
func (p *partial) snapshot() *Table {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := builder{arch: p.b.arch, rules: p.b.rules, exprs: p.b.exprs, stats: p.b.stats}
	for _, f := range p.fdes {
		for _, r := range f.rows {
			b.add(r.start, r.end, r.rule)
		}
	}
	t, err := b.finish()
	if err != nil {
		return &Table{arch: p.b.arch, pages: []uint32{0, 0}, idx16: []uint16{}}
	}
	return t
}

// partialMagic starts a marshalled partial table; its last bytes version
// the encoding together with tableMagic's (what a rule means).
const partialMagic = "RWUP0001"

// MarshalPartial encodes what a partial table compiled so far: its rules,
// expressions, and per compiled FDE its range and rows. It fails for a
// table that is not partial.
func (t *Table) MarshalPartial() ([]byte, error) {
	p := t.lazy
	if p == nil {
		return nil, fmt.Errorf("unwindtable: not a partial table")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	b := []byte(partialMagic + tableMagic[4:])
	b = append(b, byte(p.b.arch))
	b = le.AppendUint32(b, uint32(len(p.b.rules)))
	b = le.AppendUint32(b, uint32(len(p.b.exprs)))
	b = le.AppendUint32(b, uint32(len(p.fdes)))
	for _, r := range p.b.rules {
		b = append(b, byte(r.CFABase), r.CFAReg, byte(r.RAKind), byte(r.FPKind), r.RAReg, r.FPReg, r.Flags, 0)
		b = le.AppendUint32(b, uint32(r.CFAOffset))
		b = le.AppendUint32(b, uint32(r.RAOffset))
		b = le.AppendUint32(b, uint32(r.FPOffset))
	}
	for _, e := range p.b.exprs {
		b = le.AppendUint32(b, uint32(len(e)))
		b = append(b, e...)
	}
	for _, f := range p.fdes {
		b = le.AppendUint32(b, uint32(len(f.rows)))
		for _, r := range f.rows {
			b = le.AppendUint64(b, r.start)
			b = le.AppendUint64(b, r.end)
			b = le.AppendUint32(b, r.rule)
		}
	}
	return b, nil
}

// UnmarshalPartial decodes what MarshalPartial wrote into a partial table
// for the same object (hdr and eh as for NewPartial) that goes on
// compiling the FDEs it does not hold. Every invariant lookups rely on is
// checked: a corrupt file gives an error naming the offset, never a table
// that panics or answers wrongly for a PC it holds no rows for.
func UnmarshalPartial(data []byte, hdr *cfi.EhFrameHdr, eh *cfi.Section) (*Table, error) {
	r := &reader{b: data}
	if m := r.take(len(partialMagic) + len(tableMagic) - 4); r.err != nil || string(m) != partialMagic+tableMagic[4:] {
		return nil, fmt.Errorf("%w: bad magic", errCorrupt)
	}
	a := r.take(1)
	nrules, nexprs, nfdes := int(r.u32()), int(r.u32()), int(r.u32())
	if r.err != nil {
		return nil, r.err
	}
	arch := regs.Arch(a[0])
	if uint64(nrules)*20+uint64(nexprs)*4+uint64(nfdes)*4 > uint64(len(data)-r.off) || nrules == 0 {
		return nil, fmt.Errorf("%w: counts at offset %d exceed the data", errCorrupt, len(partialMagic)+len(tableMagic)-3)
	}
	t := NewPartial(arch, hdr, eh)
	p := t.lazy
	p.b.rules = make([]Rule, 0, nrules)
	for i := 0; i < nrules; i++ {
		at := r.off
		q := r.take(20)
		rule := Rule{CFABase: CFABase(q[0]), CFAReg: q[1], RAKind: RegKind(q[2]), FPKind: RegKind(q[3]),
			RAReg: q[4], FPReg: q[5], Flags: q[6],
			CFAOffset: int32(le.Uint32(q[8:])), RAOffset: int32(le.Uint32(q[12:])), FPOffset: int32(le.Uint32(q[16:]))}
		if _, dup := p.b.ruleIdx[rule]; i == 0 && rule != (Rule{}) || i > 0 && dup {
			return nil, fmt.Errorf("%w: rule %d at offset %d out of place", errCorrupt, i, at)
		}
		p.b.ruleIdx[rule] = uint32(i)
		p.b.rules = append(p.b.rules, rule)
	}
	for i := 0; i < nexprs; i++ {
		e := r.take(int(r.u32()))
		if r.err != nil {
			return nil, r.err
		}
		p.b.exprs = append(p.b.exprs, append([]byte(nil), e...))
	}
	for _, rule := range p.b.rules {
		if !exprsFit(rule, nexprs) {
			return nil, fmt.Errorf("%w: a rule names an expression of %d", errCorrupt, nexprs)
		}
	}
	var last uint64
	for i := 0; i < nfdes && r.err == nil; i++ {
		at := r.off
		n := int(r.u32())
		if uint64(n)*20 > uint64(len(data)-r.off) || n == 0 {
			return nil, fmt.Errorf("%w: FDE %d at offset %d: bad row count %d", errCorrupt, i, at, n)
		}
		rows := make([]row, n)
		for j := range rows {
			rows[j] = row{r.u64(), r.u64(), r.u32()}
			if rows[j].end <= rows[j].start || rows[j].rule >= uint32(nrules) ||
				j > 0 && rows[j].start != rows[j-1].end || j == 0 && i > 0 && rows[0].start < last {
				return nil, fmt.Errorf("%w: FDE %d at offset %d: row %d out of order", errCorrupt, i, at, j)
			}
		}
		last = rows[n-1].end
		p.fdes = append(p.fdes, compiledFDE{start: rows[0].start, end: last, rows: rows})
	}
	if r.err != nil {
		return nil, r.err
	}
	if r.off != len(data) {
		return nil, fmt.Errorf("%w: %d trailing bytes at offset %d", errCorrupt, len(data)-r.off, r.off)
	}
	p.b.stats.FDEs = nfdes
	return t, nil
}

// exprsFit reports whether the expressions r names are among n.
func exprsFit(r Rule, n int) bool {
	ok := func(i int32) bool { return i >= 0 && int(i) < n }
	if r.CFABase == CFAExpr && !ok(r.CFAOffset) {
		return false
	}
	if (r.RAKind == RegExpr || r.RAKind == RegValExpr) && !ok(r.RAOffset) {
		return false
	}
	if (r.FPKind == RegExpr || r.FPKind == RegValExpr) && !ok(r.FPOffset) {
		return false
	}
	return true
}
