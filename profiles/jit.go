package profiles

import (
	"github.com/rewindstack/rewind/internal/jitdump"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// timedJIT names JIT code from a jitdump by the samples' times, as perf
// inject --jit does (each code load a mapping from its timestamp on, a
// move a new one): the code at an address is the code there when the
// sample was taken. Where the dump has none, other (the perf map) names
// it. Only for samples stamped with CLOCK_MONOTONIC, the dump's clock.
type timedJIT struct {
	d     *jitdump.Dump
	other target.JITSymbols // nil when none
}

// LookupJIT implements target.JITSymbols: the code there at the end.
func (j *timedJIT) LookupJIT(pc uint64) (string, uint64, bool) {
	if name, start, ok := j.d.LookupJIT(pc); ok || j.other == nil {
		return name, start, ok
	}
	return j.other.LookupJIT(pc)
}

// at returns the code at pc at time t, nil when the dump has none, and
// the symbols that name it then.
func (j *timedJIT) at(pc, t uint64) (*jitdump.Code, target.JITSymbols) {
	if c, ok := j.d.At(pc, t); ok {
		return c, codeJIT{c}
	}
	return noCode, j.other
}

// noCode keys the locations of addresses the dump had no code at, at
// their time.
var noCode = &jitdump.Code{}

// codeJIT is the symbols of one piece of code.
type codeJIT struct{ c *jitdump.Code }

func (c codeJIT) LookupJIT(pc uint64) (string, uint64, bool) {
	if pc < c.c.Start || pc >= c.c.End {
		return "", 0, false
	}
	return c.c.Name, c.c.Start, true
}

func (c codeJIT) LookupJITLine(pc uint64) (string, int, bool) { return c.c.LineAt(pc) }

// jitAt returns, for a frame at pc in m at time t, the code a timed
// jitdump has there (nil when m has none) and the mapping to symbolize
// it in (m, or a copy naming only that code).
func jitAt(m *target.Mapping, pc, t uint64) (*jitdump.Code, *target.Mapping) {
	tj, ok := m.JIT.(*timedJIT)
	if !ok {
		return nil, m
	}
	c, syms := tj.at(pc, t)
	mc := *m
	mc.JIT = syms
	return c, &mc
}

// timedFrames reports whether a frame is in memory a timed jitdump
// names, whose names depend on the sample's time.
func timedFrames(frames []unwind.Frame) bool {
	for i := range frames {
		if m := frames[i].Map; m != nil && m.JIT != nil {
			if _, ok := m.JIT.(*timedJIT); ok {
				return true
			}
		}
	}
	return false
}

// firstDump returns the jitdump among srcs (it comes first).
func firstDump(srcs target.JITSources) (*jitdump.Dump, bool) {
	if len(srcs) == 0 {
		return nil, false
	}
	d, ok := srcs[0].(*jitdump.Dump)
	return d, ok
}
