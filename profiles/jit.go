package profiles

import (
	"sync"
	"time"

	"github.com/rewindstack/rewind/internal/jitdump"
	"github.com/rewindstack/rewind/internal/perfmap"
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

// perfMapSyms names JIT code from a process's perf map, read again when
// a lookup misses and the file has grown since (at most once a second):
// Node appends to its map as it compiles, so a map read at the process's
// first samples lacks the functions compiled later.
type perfMapSyms struct {
	pid     int
	mu      sync.Mutex
	m       *perfmap.Map
	ver     int       // bumped on each read that replaced m
	checked time.Time // the last time a miss looked at the file
	warn    func(error)
}

// perfMapAgain is how often a miss may look at a map's size.
const perfMapAgain = time.Second

// LookupJIT implements target.JITSymbols.
func (p *perfMapSyms) LookupJIT(pc uint64) (string, uint64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if name, start, ok := p.m.LookupJIT(pc); ok {
		return name, start, ok
	}
	if now := time.Now(); now.Sub(p.checked) >= perfMapAgain {
		p.checked = now
		if size, err := perfmap.Size(p.pid); err == nil && size != p.m.Size {
			m, err := perfmap.Open(p.pid)
			p.warn(err)
			if err == nil {
				p.m = m
				p.ver++
				return p.m.LookupJIT(pc)
			}
		}
	}
	return "", 0, false
}

// version returns how many times the map was read again.
func (p *perfMapSyms) version() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ver
}

// jitVersion returns the version of JIT symbols that may be read again
// (perfMapSyms, alone or among others), 0 for the others.
func jitVersion(j target.JITSymbols) int {
	switch j := j.(type) {
	case *perfMapSyms:
		return j.version()
	case *timedJIT:
		if j.other != nil {
			return jitVersion(j.other)
		}
	case target.JITSources:
		v := 0
		for _, s := range j {
			v += jitVersion(s)
		}
		return v
	}
	return 0
}

// namesJIT reports whether JIT symbols name any code yet (a perf map
// looked for before the JIT wrote it names none).
func namesJIT(j target.JITSymbols) bool {
	if p, ok := j.(*perfMapSyms); ok {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.m.Len() > 0
	}
	return true
}
