package bpfunwind

import (
	"github.com/rewindstack/rewind/internal/goruntime"
	"github.com/rewindstack/rewind/target"
)

// goFile is the BPF program's struct go_file: what its walk needs of a Go
// program to cross from runtime.morestack and runtime.systemstack on g0
// to the goroutine (go_jump in bpf/unwind.bpf.c).
type goFile struct {
	// File addresses: the extents of runtime.morestack,
	// runtime.systemstack and runtime.systemstack_switch, the entries
	// of morestack, morestack_noctxt and mstart1.
	MsLo, MsHi, SsLo, SsHi, SwLo, SwHi, MsEntry, MsncEntry, Mstart1 uint64
	// TLSG is the g's offset from the thread pointer.
	TLSG int64
	// Offsets of runtime.g and runtime.m fields.
	GM, GSchedSP, GSchedPC, GSchedBP, GStackLo, GStackHi, MG0, MCurG uint16
}

// goInfo returns what the BPF walk crosses Go stack switches of mod with:
// the extents of the switching functions from its symbol or pcln table,
// the runtime's offsets and its g's place in TLS (internal/goruntime, as
// goroutine dumps read them). ok is false for a module that is not a Go
// program, or whose offsets or TLS slot are unknown (the walk then ends
// at morestack and follows systemstack's frame pointer, as without it).
func goInfo(mod *target.Module) (goFile, bool) {
	var gf goFile
	if mod == nil || mod.File == nil || !mod.File.Go {
		return gf, false
	}
	c := goruntime.CrossingOf(mod)
	if c == nil || c.Morestack[1] == 0 || c.Systemstack[1] == 0 || c.SystemstackSwitch[1] == 0 || !c.Layout.HasTLSG {
		return gf, false
	}
	ms, ss, sw, l := c.Morestack, c.Systemstack, c.SystemstackSwitch, c.Layout
	offs := []int{l.G.M, l.G.SchedSP, l.G.SchedPC, l.G.SchedBP, l.G.StackLo, l.G.StackHi, l.M.G0, l.M.CurG}
	for _, o := range offs {
		if o < 0 || o > 0xffff {
			return gf, false
		}
	}
	gf = goFile{MsLo: ms[0], MsHi: ms[1], SsLo: ss[0], SsHi: ss[1], SwLo: sw[0], SwHi: sw[1],
		MsEntry: ms[0], MsncEntry: c.MorestackNoctxt[0], Mstart1: c.Mstart1[0], TLSG: l.TLSG,
		GM: uint16(l.G.M), GSchedSP: uint16(l.G.SchedSP), GSchedPC: uint16(l.G.SchedPC), GSchedBP: uint16(l.G.SchedBP),
		GStackLo: uint16(l.G.StackLo), GStackHi: uint16(l.G.StackHi), MG0: uint16(l.M.G0), MCurG: uint16(l.M.CurG)}
	return gf, true
}
