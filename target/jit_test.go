package target

import "testing"

// fakeJIT names one range, with a line when it has one.
type fakeJIT struct {
	start, end uint64
	name       string
	line       int
}

func (f fakeJIT) LookupJIT(pc uint64) (string, uint64, bool) {
	return f.name, f.start, pc >= f.start && pc < f.end
}

type fakeLines struct{ fakeJIT }

func (f fakeLines) LookupJITLine(pc uint64) (string, int, bool) { return "/app.js", f.line, true }

// TestJITSources: the first source that names an address names it, and
// its line comes from that source alone (a perf map has none, even where
// a jitdump after it would have one).
func TestJITSources(t *testing.T) {
	s := JITSources{fakeLines{fakeJIT{0x1000, 0x2000, "dump", 7}}, fakeJIT{0x1800, 0x3000, "map", 0}, fakeLines{fakeJIT{0x2800, 0x4000, "late", 9}}}
	for _, c := range []struct {
		pc   uint64
		name string
		line int
	}{{0x1900, "dump", 7}, {0x2100, "map", 0}, {0x2900, "map", 0}, {0x3100, "late", 9}, {0x5000, "", 0}} {
		name, _, ok := s.LookupJIT(c.pc)
		_, line, _ := s.LookupJITLine(c.pc)
		if ok != (c.name != "") || name != c.name || line != c.line {
			t.Errorf("%#x: %q line %d, want %q line %d", c.pc, name, line, c.name, c.line)
		}
	}
}
