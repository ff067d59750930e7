package unwind

import (
	"slices"
	"testing"

	"github.com/rewindstack/rewind/corefile"
	"github.com/rewindstack/rewind/symbolize"
)

// TestNoReturnCallBeforeEntry: a function that ends with a call to a
// function that never returns pushes, as its return address, the first
// byte of whatever follows it, here _start (gcc lays main out just before
// _start, so a main ending in exit(0) does this). That is not a return
// address a context-switch library planted, as __start_context's is: the
// walk goes on to _start and ends there. The core is the kernel's dump of
// testdata/planted/root.S.
func TestNoReturnCallBeforeEntry(t *testing.T) {
	c, err := corefile.Open("testdata/planted/root.core")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tg, err := c.Target(nil, "testdata/planted/root")
	if err != nil {
		t.Fatal(err)
	}
	sym := &symbolize.Symbolizer{}
	for _, name := range []string{"auto", "dwarf"} {
		u, _ := ByName(name)
		st := u.Walk(tg.Contexts[0].Regs, tg.Mem, tg.Space)
		var got []string
		for _, f := range st.Frames {
			fn := ""
			if locs := sym.Frame(f.Map, f.PC, f.Exact); len(locs) > 0 {
				fn = locs[len(locs)-1].Function
			}
			got = append(got, fn)
		}
		// _start's CFI marks its return address undefined, as glibc's
		// does.
		if want := []string{"crash", "middle", "_start"}; !slices.Equal(got, want) || st.End != EndRAUndefined {
			t.Errorf("%s: %q (end %s %s), want %q ending at _start's undefined return address", name, got, st.End, st.Detail, want)
		}
	}
}
