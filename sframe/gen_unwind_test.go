package sframe_test

import (
	"fmt"
	"github.com/rewindstack/rewind/target"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/sframe"
)

// genSource generates, once per module, an SFrame section from the
// module's CFI: a Stepper.Source that gives every object (the program,
// libc, ld.so, the vDSO) the section rewind sframe gen would add to it.
type genSource struct {
	version uint8
	m       sync.Map // *target.Module -> *genEntry
}

type genEntry struct {
	once sync.Once
	sec  *sframe.Section
	err  error
}

func (s *genSource) Section(mod *target.Module) (*sframe.Section, error) {
	if mod == nil || mod.File == nil {
		return nil, nil
	}
	v, ok := s.m.Load(mod)
	if !ok {
		v, _ = s.m.LoadOrStore(mod, &genEntry{})
	}
	e := v.(*genEntry)
	e.once.Do(func() {
		g, err := sframe.Generate(mod.File, sframe.GenOptions{Version: s.version})
		if err != nil {
			e.err = err
			return
		}
		// Where rewind sframe gen would put it: after the last segment
		// (version 2 start offsets are 32-bit, relative to the section).
		var addr uint64
		for _, l := range mod.File.Loads {
			addr = max(addr, (l.Vaddr+l.Memsz+0xfff)&^0xfff)
		}
		data, err := g.Encode(addr)
		if err != nil {
			e.err = err
			return
		}
		e.sec, e.err = sframe.Parse(data, addr, mod.Path+" generated .sframe")
	})
	return e.sec, e.err
}

// TestGenUnwindMatchesEuStack walks cores of the fixture programs (built
// without SFrame, with and without frame pointers) with SFrame sections
// generated from every object's CFI, SFrame first and CFI and frame
// pointers behind it, and checks that the physical frames are exactly
// eu-stack's. Every frame whose callee has a generated SFrame row (not a
// signal frame) must have come from SFrame, so that a wrong row cannot
// hide behind the fallbacks.
func TestGenUnwindMatchesEuStack(t *testing.T) {
	programs := []program{{"threads", nil}, {"recurse", nil}, {"recurse", []string{"2000"}},
		{"signal", nil}, {"signal", []string{"busy"}}, {"plt", nil}, {"demo", nil}}
	variants := []fixture.Variant{fixture.Variants[0], fixture.Variants[3]} // O0-fp, O2-nofp
	sources := map[uint8]*genSource{2: {version: 2}, 3: {version: 3}}
	var total [4]atomic.Int64
	var bySFrame [4]atomic.Int64
	t.Run("group", func(t *testing.T) {
		for _, p := range programs {
			for _, v := range variants {
				p, v := p, v
				t.Run(p.String()+"/"+v.Name, func(t *testing.T) {
					t.Parallel()
					exe := fixture.Build(t, p.name, v)
					proc := fixture.Start(t, exe, p.args...)
					core := fixture.Gcore(t, proc)
					for _, version := range []uint8{2, 3} {
						n, s := genCompareCore(t, core, exe, sources[version])
						total[version].Add(int64(n))
						bySFrame[version].Add(int64(s))
					}
				})
			}
		}
	})
	for _, v := range []uint8{2, 3} {
		if total[v].Load() == 0 && !t.Failed() {
			t.Skip("no core was compared: the subtests say why")
		}
		t.Logf("v%d: %d frames in all, %d of them produced by generated SFrame", v, total[v].Load(), bySFrame[v].Load())
		if !t.Failed() && bySFrame[v].Load() == 0 {
			t.Errorf("v%d: no frame came from SFrame", v)
		}
	}
}

func genCompareCore(t *testing.T, core, exe string, src *genSource) (frames, bySFrame int) {
	return compareCoreWith(t, core, exe, fmt.Sprintf("v%d: ", src.version), src.Section, true)
}
