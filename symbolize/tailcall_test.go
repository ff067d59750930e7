package symbolize

import (
	"debug/elf"
	"encoding/binary"
	"github.com/rewindstack/rewind/internal/elfdata"
	"slices"
	"testing"
)

// tailIndex builds testdata/tailcall.c and returns its DWARF sections,
// an index of them, and its function symbols' addresses.
func tailIndex(t testing.TB, flags ...string) (map[string][]byte, *dwarfIndex, map[string]uint64) {
	t.Helper()
	exe := buildC(t, "gcc", "tailcall.c", append([]string{"-O2"}, flags...)...)
	ef, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	secs := map[string][]byte{}
	for _, name := range append([]string{"aranges"}, debugSections...) {
		if s := ef.Section(".debug_" + name); s != nil {
			b, err := elfdata.Section(s)
			if err != nil {
				t.Fatal(err)
			}
			secs[name] = b
		}
	}
	syms, _ := ef.Symbols()
	addr := map[string]uint64{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
			addr[s.Name] = s.Value
		}
	}
	return secs, newDWARFIndex(sourceOf(secs, binary.LittleEndian), nil), addr
}

// TestTailCallSites reads the call sites gcc emits for testdata/tailcall.c
// in DWARF 5 and in DWARF 4 (GNU extensions) and searches chains in them.
func TestTailCallSites(t *testing.T) {
	for _, dw := range []string{"-gdwarf-5", "-gdwarf-4"} {
		t.Run(dw[2:], func(t *testing.T) {
			_, ix, addr := tailIndex(t, dw)
			// One tail-call site: its target's kind, address or name.
			one := func(fn string) callSite {
				t.Helper()
				sites, ok := ix.tailSites(addr[fn])
				if !ok || len(sites) != 1 {
					t.Fatalf("%s: tail-call sites %+v (function found: %v), want one", fn, sites, ok)
				}
				return sites[0]
			}
			for fn, to := range map[string]string{"b": "c", "c": "d", "ping": "pong"} {
				if s := one(fn); s.kind != targetAddr || s.addr != addr[to] {
					t.Errorf("%s's tail call: %+v, want one to %s at %#x", fn, s, to, addr[to])
				}
			}
			if s := one("indirect"); s.kind != targetUnknown {
				t.Errorf("indirect's tail call: %+v, want an unknown target", s)
			}
			if s := one("lib"); s.kind != targetName || s.name != "printf" {
				t.Errorf("lib's tail call: %+v, want printf by name", s)
			}
			if sites, _ := ix.tailSites(addr["pong"]); len(sites) != 2 {
				t.Errorf("pong: %d tail-call sites, want 2", len(sites))
			}
			if sites, ok := ix.tailSites(addr["a"]); !ok || len(sites) != 0 {
				t.Errorf("a: tail-call sites %+v (function found: %v), want none", sites, ok)
			}
			if _, ok := ix.tailSites(addr["a"] + 1); ok {
				t.Error("a function found at a's entry + 1")
			}

			// main's calls, found by their targets.
			calls := map[string]callSite{}
			for _, ci := range ix.unitsAt(addr["main"]) {
				for _, s := range ix.calls(ci).sites {
					if !s.tail {
						for fn, a := range addr {
							if s.kind == targetAddr && s.addr == a {
								calls[fn] = s
							}
						}
					}
				}
			}
			for _, fn := range []string{"a", "ping", "indirect"} {
				s, ok := calls[fn]
				if !ok {
					t.Fatalf("main's call to %s not found", fn)
				}
				if got, ok := ix.callSiteAt(s.pc); !ok || got != s {
					t.Errorf("callSiteAt(%#x) = %+v, %v; want %+v", s.pc, got, ok, s)
				}
			}
			search := func(from callSite, callee string) []string {
				ts := &tailSearch{objs: []tailObj{{sites: ix.tailSites}}, callee: tailFunc{0, addr[callee]}}
				chain, callers, callees, ok := ts.find(from)
				if !ok {
					return nil
				}
				var names []string
				for _, st := range shown(chain, callers, callees) {
					names = append(names, nameAt(addr, st.site.pc-1))
				}
				return names
			}
			if got := search(calls["a"], "b"); got != nil {
				t.Errorf("a direct call: %q, want no frames", got)
			}
			// main -> a is a direct call too, but b is not what a's call
			// site in main targets: as if the callee were d, a's chain is
			// not searched through a's own (non-tail) calls.
			if got := search(calls["a"], "d"); got != nil {
				t.Errorf("main's call to a with callee d: %q, want none (a has no tail calls)", got)
			}
			if got := search(calls["ping"], "d"); !slices.Equal(got, []string{"pong", "ping"}) {
				t.Errorf("ping -> pong -> d (pong -> ping a cycle): %q, want [pong ping]", got)
			}
			if got := search(calls["indirect"], "d"); got != nil {
				t.Errorf("through an indirect tail call: %q, want none", got)
			}
		})
	}
}

// nameAt names the function symbol containing a (the nearest below).
func nameAt(addr map[string]uint64, a uint64) string {
	best, name := uint64(0), ""
	for fn, s := range addr {
		if s <= a && s > best {
			best, name = s, fn
		}
	}
	return name
}

// graph is a tail-call graph for the search: each function's tail-call
// sites, in order; a site's pc is 1000*function + index + 1 and its
// target the function given (-1: unknown).
type graph map[uint64][]int

func (g graph) obj() tailObj {
	return tailObj{sites: func(fn uint64) ([]callSite, bool) {
		targets, ok := g[fn]
		if !ok {
			return nil, false
		}
		var sites []callSite
		for i, to := range targets {
			s := callSite{pc: 1000*fn + uint64(i) + 1, tail: true, kind: targetAddr, addr: uint64(to)}
			if to < 0 {
				s.kind, s.addr = targetUnknown, 0
			}
			sites = append(sites, s)
		}
		return sites, true
	}}
}

// TestTailChainSearch checks gdb's rules on hand-made graphs: the caller
// calls function 1, the callee is function 9.
func TestTailChainSearch(t *testing.T) {
	for _, c := range []struct {
		name string
		g    graph
		want []uint64 // the shown sites' pcs, innermost first
	}{
		{"direct", graph{9: nil}, nil},
		{"unique", graph{1: {2}, 2: {3}, 3: {9}, 9: nil}, []uint64{3001, 2001, 1001}},
		{"ambiguous", graph{1: {2, 3}, 2: {9}, 3: {9}, 9: nil}, nil},
		{"common end", graph{1: {2, 3}, 2: {4}, 3: {4}, 4: {9}, 9: nil}, []uint64{4001}},
		{"common start", graph{1: {2}, 2: {3, 4}, 3: {9}, 4: {9}, 9: nil}, []uint64{1001}},
		{"common start and end", graph{1: {2}, 2: {3, 4}, 3: {5}, 4: {5}, 5: {9}, 9: nil}, []uint64{5001, 1001}},
		{"dead ends", graph{1: {2, 3}, 2: {}, 3: {9}, 9: nil}, []uint64{3001, 1002}},
		{"cycle", graph{1: {2}, 2: {1, 9}, 9: nil}, []uint64{2002, 1001}},
		{"self", graph{1: {1, 9}, 9: nil}, []uint64{1002}},
		{"no path", graph{1: {2}, 2: {}, 9: nil}, nil},
		{"direct or tail", graph{1: {9}, 9: nil}, []uint64{1001}},
		{"unknown target", graph{1: {2, -1}, 2: {9}, 9: nil}, nil},
		{"not a function", graph{1: {7}, 9: nil}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts := &tailSearch{objs: []tailObj{c.g.obj()}, callee: tailFunc{0, 9}}
			first := callSite{pc: 1, kind: targetAddr, addr: 1}
			if c.name == "direct" {
				first.addr = 9
			}
			var got []uint64
			if chain, callers, callees, ok := ts.find(first); ok {
				for _, st := range shown(chain, callers, callees) {
					got = append(got, st.site.pc)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("shown %v, want %v", got, c.want)
			}
		})
	}
}

// TestTailChainSearchBounded gives the search a graph with more paths
// than it may try: it must give up, not run on.
func TestTailChainSearchBounded(t *testing.T) {
	g := graph{9: nil}
	const n = 40
	for f := 1; f <= n; f++ {
		for to := 1; to <= n; to++ {
			g[uint64(f)] = append(g[uint64(f)], to)
		}
		g[uint64(f)] = append(g[uint64(f)], 9)
	}
	ts := &tailSearch{objs: []tailObj{g.obj()}, callee: tailFunc{0, 9}}
	if _, _, _, ok := ts.find(callSite{pc: 1, kind: targetAddr, addr: 1}); ok {
		t.Error("a chain found in a complete graph")
	}
	if ts.steps > maxTailChainSteps+1 {
		t.Errorf("%d steps, bound %d", ts.steps, maxTailChainSteps)
	}
}

// FuzzTailCalls overwrites bytes of testdata/tailcall.c's .debug_info or
// .debug_abbrev and reads call sites at, and searches chains from, every
// instruction: nothing may panic or run unbounded.
func FuzzTailCalls(f *testing.F) {
	secs, _, addr := tailIndex(f, "-gdwarf-5")
	var funcs []uint64
	for _, fn := range []string{"a", "b", "c", "d", "ping", "pong", "indirect", "lib", "lib2", "main"} {
		funcs = append(funcs, addr[fn])
	}
	f.Add(uint8(0), uint32(0), []byte{0xff, 0xff, 0xff, 0xff})
	f.Add(uint8(1), uint32(40), []byte{0x48, 0x00})
	f.Add(uint8(0), uint32(0x200), []byte{0x80, 0x80, 0x80, 0x80, 0x80})
	f.Fuzz(func(t *testing.T, which uint8, off uint32, patch []byte) {
		name := []string{"info", "abbrev"}[int(which)%2]
		mod := map[string][]byte{}
		for k, v := range secs {
			mod[k] = v
		}
		b := append([]byte(nil), secs[name]...)
		if len(b) == 0 {
			return
		}
		copy(b[int(off)%len(b):], patch)
		mod[name] = b
		ix := newDWARFIndex(sourceOf(mod, binary.LittleEndian), nil)
		for _, fn := range funcs {
			ix.tailSites(fn)
			for pc := fn; pc < fn+0x40; pc++ {
				s, ok := ix.callSiteAt(pc)
				if !ok {
					continue
				}
				for _, callee := range funcs {
					ts := &tailSearch{objs: []tailObj{{sites: ix.tailSites, byName: func(string) (uint64, bool) { return funcs[0], true }}},
						callee: tailFunc{0, callee}}
					ts.find(s)
				}
			}
		}
	})
}
