package fibers_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/output"
	"github.com/rewindstack/rewind/stacks"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// gdbTailPy is gdbPy with gdb's tail-call frames, their names marked
// with a trailing " [tail-call]".
const gdbTailPy = `import gdb
f = gdb.newest_frame()
while f is not None and f.pc() != 0:
    mark = " [tail-call]" if f.type() == gdb.TAILCALL_FRAME else ""
    gdb.write("@F %x %s%s\n" % (f.pc(), f.name() or "??", mark))
    f = f.older()
`

// TestTarantoolTailCallsMatchGdb: with tail-call frames, each sleeping
// fiber of the Tarantool fixture shows fiber_sleep, which jumped to
// fiber_yield_timeout, between fiber_yield_timeout and lbox_fiber_sleep,
// as gdb does given the fiber's registers; every fiber compared has the
// functions gdb shows, its tail-call frames where gdb has them.
func TestTarantoolTailCallsMatchGdb(t *testing.T) {
	if _, err := exec.LookPath("gdb"); err != nil {
		t.Skip("gdb not installed")
	}
	p, _ := startTarantool(t)
	tg, _ := tarantoolLive(t, p.PID)
	sym := &symbolize.Symbolizer{Inlines: true, TailCalls: true}
	rep := stacks.Report(tg, stacks.Walk(tg, stacks.Options{Unwinder: unwind.NewAuto()}), sym)
	eachParkedFiber(t, tg, rep, func(f *output.Fiber, c *target.Context) {
		var got []string
		for _, fr := range f.Frames {
			switch {
			case fr.Interpreted:
			case fr.Method == unwind.MethodTailCall.String() && !fr.Inlined:
				got = append(got, fr.Function+" [tail-call]")
			default:
				got = append(got, fr.Function)
			}
		}
		want, out := gdbBacktraceWith(t, p.PID, c.Regs, gdbTailPy)
		if len(want) < 4 || !sameFunctions(got, want) {
			t.Errorf("fiber %s: rewind %q\ngdb %q\n%s", *f.Name, got, want, out)
		}
		if strings.HasPrefix(*f.Name, "sleeper") && (len(got) < 3 || got[1] != "fiber_sleep [tail-call]") {
			t.Errorf("fiber %s: %q, want fiber_sleep as a tail-call frame second", *f.Name, got)
		}
	})
}
