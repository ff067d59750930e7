package symbolize

import (
	"cmp"
	"debug/dwarf"
	"slices"
	"sort"

	"github.com/rewindstack/rewind/internal/elfdata"
	"github.com/rewindstack/rewind/target"
)

// Tail-call frames: a function that ended in a jump to another (a
// sibling call) has no frame left on the stack, but DWARF's call-site
// entries say where every call and tail call of a function goes. Between
// a frame and its caller, when the caller's call instruction calls F and
// the frame is in another function G, the functions that must have run
// in between are found as gdb finds them (its "tail-call frames"):
//
//   - the caller's call site is the DW_TAG_call_site (DW_TAG_GNU_call_site
//     in DWARF 4) whose DW_AT_call_return_pc (DW_AT_low_pc) is the
//     caller's return address; its target F is the function its
//     DW_AT_call_origin (DW_AT_abstract_origin), or DW_AT_call_target,
//     refers to;
//   - every path from F to G through tail-call sites (those with
//     DW_AT_call_tail_call or DW_AT_GNU_tail_call), each site at most
//     once on a path, is a possible chain; a direct call (F = G) is the
//     empty chain;
//   - of all the chains, only the call sites common to all at their
//     start (from F's side) and at their end (from G's side) are shown.
//     Nothing is shown when there is no path, when the chains have
//     nothing in common, or when any site on the way has a target that
//     cannot be known without the registers (an indirect tail call
//     through a DWARF expression): gdb gives up on the whole search then.
//
// Each function of a chain is shown as a frame whose PC is its tail-call
// site's return address (the address after the jump), looked up at the
// address before it like any caller.

// unitCalls is a unit's call sites.
type unitCalls struct {
	sites []callSite // sorted by pc
	// funcs maps the entry address of every subprogram with code to its
	// tail-call sites, in the order of the entries (read-only: a search
	// takes them as they are, each step of it costing no copy).
	funcs map[uint64][]callSite
}

// callSite is one DW_TAG_call_site or DW_TAG_GNU_call_site.
type callSite struct {
	pc   uint64 // the return address: the address after the call or jump
	addr uint64 // target's entry, for targetAddr
	name string // target's name, for targetName
	kind uint8
	tail bool
}

// Kinds of call-site targets.
const (
	targetUnknown = iota // none given, a DWARF expression, or a target without code
	targetAddr           // a function with code: its entry address
	targetName           // a declaration: found by name in the symbol tables
)

// DWARF 4 GNU extensions for call sites.
const (
	tagGNUCallSite            = dwarf.Tag(0x4109)
	attrGNUCallSiteTarget     = dwarf.Attr(0x2113)
	attrGNUTailCall           = dwarf.Attr(0x2115)
	maxTailChainSteps         = 1 << 14 // bounds the search through the tail-call graph
	maxTailChainLength        = 64      // bounds a chain
	maxCallSitesPerSubprogram = 1 << 16
)

// calls returns unit ci's call sites, reading them on first use; a unit
// that cannot be read has none.
func (ix *dwarfIndex) calls(ci int) *unitCalls {
	slot := &ix.cus[ci]
	if uc := slot.calls.Load(); uc != nil {
		return uc
	}
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if uc := slot.calls.Load(); uc != nil {
		return uc
	}
	uc := &unitCalls{funcs: map[uint64][]callSite{}}
	ix.mu.Lock()
	src := ix.source()
	ix.mu.Unlock()
	if src != nil {
		if err := elfdata.Protect(func() error { return ix.readCalls(src, slot.off, uc) }); err != nil {
			uc = &unitCalls{funcs: map[uint64][]callSite{}}
		}
	}
	slot.calls.Store(uc)
	return uc
}

// wantCalls reads the call sites of every unit covering one of addrs
// that has not been read yet, the units' DIEs read in one pass: asked for
// one at a time, as a search finds it needs them, each unit of libc's
// debug file took a new dwarf.Data (a dump's tail-call search took 1 s,
// most of it waiting; see dwarfSource.data).
func (ix *dwarfIndex) wantCalls(addrs []uint64) {
	var offs []uint64
	var cis []int
	seen := map[int]bool{}
	for _, a := range addrs {
		for _, ci := range ix.unitsAt(a) {
			if !seen[ci] && ix.cus[ci].calls.Load() == nil {
				seen[ci] = true
				offs = append(offs, ix.cus[ci].off)
				cis = append(cis, ci)
			}
		}
	}
	if len(cis) == 0 {
		return
	}
	ix.mu.Lock()
	src := ix.source()
	ix.mu.Unlock()
	if src == nil || src.data(offs...) == nil {
		return
	}
	for _, ci := range cis {
		ix.calls(ci)
	}
}

// readCalls reads the call sites of the unit whose header is at off, and
// the entries of its subprograms.
func (ix *dwarfIndex) readCalls(src *dwarfSource, off uint64, uc *unitCalls) error {
	u, d, r, cu, err := src.openUnit(off)
	if err != nil || cu == nil || !cu.Children {
		return err
	}
	type tailRef struct {
		fn   uint64
		site int
	}
	var tails []tailRef
	// stack holds, for each open entry with children, the entry address
	// of the innermost subprogram around it (0: none).
	stack := []uint64{0}
	for n := 0; len(stack) > 0 && n < ix.maxEntries; n++ {
		e, err := r.Next()
		if err != nil || e == nil {
			break
		}
		if e.Tag == 0 {
			stack = stack[:len(stack)-1]
			continue
		}
		fn := stack[len(stack)-1]
		descend := false
		switch e.Tag {
		case dwarf.TagSubprogram:
			fn = 0
			if rs, _ := d.Ranges(e); len(rs) > 0 && rs[0][0] != 0 && rs[0][1] > rs[0][0] {
				fn = rs[0][0]
				if _, ok := uc.funcs[fn]; !ok {
					uc.funcs[fn] = nil
				}
			}
			descend = true
		case dwarf.TagCallSite, tagGNUCallSite:
			if s, ok := ix.callSiteOf(src, u, d, e); ok {
				if s.tail && fn != 0 {
					tails = append(tails, tailRef{fn, len(uc.sites)})
				}
				uc.sites = append(uc.sites, s)
			}
		case dwarf.TagInlinedSubroutine, dwarf.TagLexDwarfBlock, dwarf.TagNamespace, dwarf.TagModule,
			dwarf.TagClassType, dwarf.TagStructType, dwarf.TagUnionType,
			dwarf.TagTryDwarfBlock, dwarf.TagCatchDwarfBlock:
			descend = true
		}
		if !e.Children {
			continue
		}
		if !descend {
			r.SkipChildren()
			continue
		}
		stack = append(stack, fn)
	}
	for _, t := range tails {
		if l := uc.funcs[t.fn]; len(l) < maxCallSitesPerSubprogram {
			uc.funcs[t.fn] = append(l, uc.sites[t.site])
		}
	}
	slices.SortStableFunc(uc.sites, func(a, b callSite) int { return cmp.Compare(a.pc, b.pc) })
	return nil
}

// callSiteOf decodes a call-site entry of unit u, read from d; false when
// it has no address.
func (ix *dwarfIndex) callSiteOf(src *dwarfSource, u unitSpan, d *dwarf.Data, e *dwarf.Entry) (callSite, bool) {
	var s callSite
	pc, ok := e.Val(dwarf.AttrCallReturnPC).(uint64)
	if !ok {
		pc, ok = e.Val(dwarf.AttrLowpc).(uint64)
	}
	if !ok || pc == 0 {
		return s, false
	}
	s.pc = pc
	s.tail = flagSet(e, dwarf.AttrCallTailCall) || flagSet(e, attrGNUTailCall)
	var f *dwarf.Field
	for _, a := range []dwarf.Attr{dwarf.AttrCallTarget, attrGNUCallSiteTarget, dwarf.AttrCallOrigin, dwarf.AttrAbstractOrigin} {
		if f = e.AttrField(a); f != nil {
			break
		}
	}
	if f == nil {
		return s, true
	}
	var target *dwarf.Entry
	inAlt := false
	switch v := f.Val.(type) {
	case dwarf.Offset:
		if f.Class == dwarf.ClassReference {
			if uint64(v) < u.die || uint64(v) >= u.end {
				// In another unit: read where that unit is read.
				d = src.data(uint64(v))
			}
			target = readEntry(d, v)
		}
	case int64:
		if f.Class == dwarf.ClassReferenceAlt && ix.alt != nil && v > 0 {
			target, inAlt = readEntry(ix.alt.d, dwarf.Offset(v)), true
		}
	}
	if target == nil {
		return s, true // a DWARF expression, or a reference that cannot be read
	}
	if flagSet(target, dwarf.AttrDeclaration) && target.AttrField(dwarf.AttrSpecification) == nil {
		name := ix.str(target, dwarf.AttrLinkageName, inAlt)
		if name == "" {
			name = ix.str(target, attrMIPSLinkageName, inAlt)
		}
		if name == "" {
			name = ix.str(target, dwarf.AttrName, inAlt)
		}
		if name != "" {
			s.kind, s.name = targetName, name
		}
		return s, true
	}
	if inAlt {
		return s, true // the supplementary file has no code
	}
	if rs, _ := d.Ranges(target); len(rs) > 0 && rs[0][0] != 0 && rs[0][1] > rs[0][0] {
		s.kind, s.addr = targetAddr, rs[0][0]
	}
	return s, true
}

// readEntry reads the entry at off (nil if it cannot).
func readEntry(d *dwarf.Data, off dwarf.Offset) *dwarf.Entry {
	if d == nil {
		return nil
	}
	r := d.Reader()
	r.Seek(off)
	e, err := r.Next()
	if err != nil {
		return nil
	}
	return e
}

func flagSet(e *dwarf.Entry, a dwarf.Attr) bool {
	v, _ := e.Val(a).(bool)
	return v
}

// maxUnitsAt bounds the units unitsAt returns: an address is in one unit
// (a few where units overlap); corrupt ranges may put it in thousands.
const maxUnitsAt = 16

// unitsAt returns the units whose ranges cover pc (at most maxUnitsAt).
func (ix *dwarfIndex) unitsAt(pc uint64) []int {
	var out []int
	i := sort.Search(len(ix.ranges), func(i int) bool { return ix.ranges[i].lo > pc }) - 1
	for ; i >= 0 && len(out) < maxUnitsAt; i-- {
		r := ix.ranges[i]
		if pc < r.hi && !slices.Contains(out, int(r.cu)) {
			out = append(out, int(r.cu))
		}
		if i == 0 || ix.maxHi[i-1] <= pc {
			break
		}
	}
	return out
}

// callSiteAt returns the call site whose return address is ret.
func (ix *dwarfIndex) callSiteAt(ret uint64) (callSite, bool) {
	if ret == 0 {
		return callSite{}, false
	}
	for _, ci := range ix.unitsAt(ret - 1) {
		uc := ix.calls(ci)
		i := sort.Search(len(uc.sites), func(i int) bool { return uc.sites[i].pc >= ret })
		if i < len(uc.sites) && uc.sites[i].pc == ret {
			return uc.sites[i], true
		}
	}
	return callSite{}, false
}

// tailSites returns the tail-call sites of the function whose entry is
// fn; ok is false when no subprogram with code starts there.
func (ix *dwarfIndex) tailSites(fn uint64) (sites []callSite, ok bool) {
	for _, ci := range ix.unitsAt(fn) {
		if l, found := ix.calls(ci).funcs[fn]; found {
			return l, true
		}
	}
	return nil, false
}

// tailFunc is a function in the tail-call search: the object it is in
// (one of the two the search knows) and its entry address there.
type tailFunc struct {
	obj  int // index into tailSearch.objs
	addr uint64
}

// tailObj is an object the search can look into.
type tailObj struct {
	// sites returns the tail-call sites of the function whose entry is
	// fn; false when no subprogram with code starts there (the search is
	// then given up, as gdb does).
	sites func(fn uint64) ([]callSite, bool)
	// byName resolves a declared target's name to an address in the
	// object (false if it has no such symbol).
	byName func(string) (uint64, bool)
}

// tailSearch finds the tail-call chain between a caller's call site and
// the function a frame is in.
type tailSearch struct {
	objs   []tailObj
	callee tailFunc
	steps  int
	names  map[string]tailFunc // targets found by name (see target)
	funcs  map[tailFunc]funcSites
}

// funcSites is what tailObj.sites said of a function.
type funcSites struct {
	sites []callSite
	ok    bool
}

// sites returns f's tail-call sites, asking its object once per search.
func (ts *tailSearch) sites(f tailFunc) ([]callSite, bool) {
	if r, ok := ts.funcs[f]; ok {
		return r.sites, r.ok
	}
	sites, ok := ts.objs[f.obj].sites(f.addr)
	if ts.funcs == nil {
		ts.funcs = map[tailFunc]funcSites{}
	}
	ts.funcs[f] = funcSites{sites, ok}
	return sites, ok
}

// target resolves a call site of object obj to a function; ok is false
// when the target is unknown (the search is then given up).
func (ts *tailSearch) target(obj int, s callSite) (tailFunc, bool) {
	switch s.kind {
	case targetAddr:
		return tailFunc{obj, s.addr}, true
	case targetName:
		// As gdb's lookup by name over every object, with the two known:
		// the call site's own object first.
		key := string(rune('0'+obj)) + s.name
		if f, ok := ts.names[key]; ok {
			return f, f.obj >= 0
		}
		f := tailFunc{obj: -1}
		for _, o := range []int{obj, 1 - obj} {
			if o < 0 || o >= len(ts.objs) || ts.objs[o].byName == nil {
				continue
			}
			if a, ok := ts.objs[o].byName(s.name); ok {
				f = tailFunc{o, a}
				break
			}
		}
		if ts.names == nil {
			ts.names = map[string]tailFunc{}
		}
		ts.names[key] = f
		return f, f.obj >= 0
	}
	return tailFunc{}, false
}

// chainStep is one call site on the current path: the object it is in,
// the site, and the remaining sites of the same function to try after it.
type chainStep struct {
	obj  int
	site callSite
	rest []callSite
}

// find runs the search from the caller's call site (in object 0) and
// returns the common start and end of every chain (sites, callers and
// callees as in gdb's call_site_chain), or ok false.
func (ts *tailSearch) find(first callSite) (chain []chainStep, callers, callees int, ok bool) {
	var result []chainStep
	have := false
	// candidate intersects a chain found with those before it; false when
	// nothing is left in common.
	candidate := func(c []chainStep) bool {
		if !have {
			result = slices.Clone(c)
			callers, callees, have = len(c), len(c), true
			return true
		}
		n := min(callers, len(c))
		for i := 0; i < n; i++ {
			if !sameSite(result[i], c[i]) {
				n = i
				break
			}
		}
		callers = n
		n = min(callees, len(c))
		for i := 0; i < n; i++ {
			if !sameSite(result[len(result)-1-i], c[len(c)-1-i]) {
				n = i
				break
			}
		}
		callees = n
		return callers > 0 || callees > 0
	}
	type pcKey struct {
		obj int
		pc  uint64
	}
	onPath := map[pcKey]bool{}
	var path []chainStep
	curObj, cur := 0, first
	for {
		ts.steps++
		if ts.steps > maxTailChainSteps {
			return nil, 0, 0, false
		}
		t, known := ts.target(curObj, cur)
		if !known {
			return nil, 0, 0, false
		}
		var next []callSite
		if t == ts.callee {
			if !candidate(path) {
				return nil, 0, 0, false
			}
		} else {
			sites, ok := ts.sites(t)
			if !ok {
				return nil, 0, 0, false
			}
			next = sites
			curObj = t.obj
		}
		// Enter the first site of next not on the path, else backtrack to
		// the nearest step with a sibling left.
		entered := false
		for {
			for len(next) > 0 {
				s := next[0]
				next = next[1:]
				if len(path) < maxTailChainLength && !onPath[pcKey{curObj, s.pc}] {
					onPath[pcKey{curObj, s.pc}] = true
					path = append(path, chainStep{curObj, s, next})
					entered = true
					break
				}
			}
			if entered || len(path) == 0 {
				break
			}
			last := path[len(path)-1]
			path = path[:len(path)-1]
			delete(onPath, pcKey{last.obj, last.site.pc})
			curObj, next = last.obj, last.rest
		}
		if !entered {
			break
		}
		top := path[len(path)-1]
		curObj, cur = top.obj, top.site
	}
	if !have || len(result) == 0 {
		return nil, 0, 0, false
	}
	return result, callers, callees, true
}

func sameSite(a, b chainStep) bool { return a.obj == b.obj && a.site.pc == b.site.pc }

// shown returns, innermost first (the function that jumped to the callee
// first), the call sites of the chain to show as frames.
func shown(chain []chainStep, callers, callees int) []chainStep {
	n := len(chain)
	callers, callees = min(callers, n), min(callees, n)
	var out []chainStep
	if callers == n && callees == n {
		for i := n - 1; i >= 0; i-- {
			out = append(out, chain[i])
		}
		return out
	}
	if callers+callees > n {
		callers = n - callees
	}
	for i := n - 1; i >= n-callees; i-- {
		out = append(out, chain[i])
	}
	for i := callers - 1; i >= 0; i-- {
		out = append(out, chain[i])
	}
	return out
}

// TailCallFrames returns the frames of the functions that left by a tail call
// between a frame (callee) and its caller, innermost first, as gdb shows
// them (see the comment at the top of this file): each one's mapping and
// PC, the return address of its tail-call site, to be resolved with Frame
// like any caller. It returns none when the DWARF has no call-site
// information for the caller's return address, when the chain cannot be
// told for sure, and for a caller whose PC is not a return address.
func (s *Symbolizer) TailCallFrames(callee, caller Want) []Want {
	if caller.Exact || caller.PC == 0 || caller.Map == nil || callee.Map == nil {
		return nil
	}
	cm, em := caller.Map, callee.Map
	if cm.Module == nil || cm.Module.File == nil || em.Module == nil || em.Module.File == nil {
		return nil
	}
	mods := []*target.Mapping{cm}
	if em.Module != cm.Module {
		mods = append(mods, em)
	}
	ts := &tailSearch{}
	var dws []*dwarfIndex
	for i, m := range mods {
		mi := s.module(m.Module)
		if mi.info.goTable() != nil {
			return nil
		}
		dw := mi.info.dwarf()
		sites := func(uint64) ([]callSite, bool) { return nil, false }
		switch {
		case dw != nil:
			sites = dw.tailSites
		case i == 0:
			return nil // the caller's call site is needed
		}
		// (A callee in an object without DWARF, libc without its debug
		// file, can still end a chain: found by name, as gdb finds it.)
		dws = append(dws, dw)
		ts.objs = append(ts.objs, tailObj{sites: sites, byName: func(name string) (uint64, bool) {
			if a, ok := mi.sym.SymbolByName(name); ok {
				return a, true
			}
			return mi.obj.SymbolByName(name)
		}})
	}
	calleeObj := len(ts.objs) - 1
	entry, ok := s.functionEntry(em, lookupAddr(callee), dws[calleeObj])
	if !ok {
		return nil
	}
	ts.callee = tailFunc{calleeObj, entry}
	first, ok := dws[0].callSiteAt(caller.PC - cm.Bias)
	if !ok {
		return nil
	}
	var chain []chainStep
	var callers, callees int
	if err := elfdata.Protect(func() error {
		chain, callers, callees, ok = ts.find(first)
		return nil
	}); err != nil || !ok {
		return nil
	}
	var out []Want
	for _, st := range shown(chain, callers, callees) {
		out = append(out, Want{Map: mods[st.obj], PC: st.site.pc + mods[st.obj].Bias})
	}
	return out
}

// functionEntry returns the object address of the entry of the function
// containing runtime address addr in m: its DWARF subprogram's (dw may
// be nil), else its symbol's.
func (s *Symbolizer) functionEntry(m *target.Mapping, addr uint64, dw *dwarfIndex) (uint64, bool) {
	vaddr := addr - m.Bias
	if dw != nil {
		if frames, ok := dw.lookup(vaddr); ok && len(frames) > 0 {
			if lo := frames[len(frames)-1].lo; lo != 0 && lo <= vaddr {
				return lo, true
			}
		}
	}
	locs := s.resolve(m, addr)
	if phys := locs[len(locs)-1]; phys.Function != "" && phys.Offset <= vaddr {
		return vaddr - phys.Offset, true
	}
	return 0, false
}
