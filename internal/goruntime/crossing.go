package goruntime

import "github.com/rewindstack/rewind/target"

// Crossing is what an unwinder reads of a Go program to cross from its
// system stack (g0) to the goroutine above a switch (package unwind's
// gojump.go, go_jump in package bpfunwind's BPF walk).
type Crossing struct {
	// Layout holds the runtime.g and runtime.m offsets and the g's
	// place in TLS.
	Layout *Layout
	// Extents [start, end) of the functions a crossing recognizes, in
	// file addresses; {0, 0} when the program has none. A goroutine's
	// sched.pc saved by morestack returns from a call of Morestack or
	// MorestackNoctxt; gosave_systemstack_switch points it into
	// SystemstackSwitch; g0's sched.pc returns from a call of Mstart1.
	Morestack, MorestackNoctxt, Systemstack, SystemstackSwitch, Mstart1 [2]uint64
}

var crossingKey = target.NewMemoKey()

// CrossingOf returns what m's runtime tells a crossing, read once per
// module; nil when m is not a Go program or its layout cannot be read.
func CrossingOf(m *target.Module) *Crossing {
	if m == nil || m.File == nil || !m.File.Go {
		return nil
	}
	c, _ := m.Memo(crossingKey, readCrossing).(*Crossing)
	return c
}

func readCrossing(m *target.Module) any {
	path := m.File.Path
	if path == "" {
		path = m.Path
	}
	l, err := OpenOffsets(path)
	if err != nil {
		return (*Crossing)(nil)
	}
	names := []string{"runtime.morestack", "runtime.morestack_noctxt", "runtime.systemstack", "runtime.systemstack_switch", "runtime.mstart1"}
	ext := FuncExtents(m, names...)
	return &Crossing{Layout: l, Morestack: ext[names[0]], MorestackNoctxt: ext[names[1]], Systemstack: ext[names[2]],
		SystemstackSwitch: ext[names[3]], Mstart1: ext[names[4]]}
}

// FuncExtents returns the extents [start, end) of the named functions
// of a Go module (file addresses), from its symbol table (where the
// runtime's assembly functions are named with ".abi0" too) or else from
// its pcln table; a function not found is missing.
func FuncExtents(m *target.Module, names ...string) map[string][2]uint64 {
	ext := map[string][2]uint64{}
	if m == nil || m.File == nil || !m.File.Go {
		return ext
	}
	for _, n := range names {
		for _, sym := range [2]string{n, n + ".abi0"} {
			if lo, hi, ok := m.File.SymbolExtent(sym); ok && hi > lo {
				ext[n] = [2]uint64{lo, hi}
				break
			}
		}
	}
	if len(ext) < len(names) {
		if gt := TableOf(m); gt != nil {
			for n, e := range gt.Extents(names) {
				if _, ok := ext[n]; !ok && e[1] > e[0] {
					ext[n] = e
				}
			}
		}
	}
	return ext
}
