package sframe_test

import (
	"errors"
	"fmt"
	"github.com/rewindstack/rewind/target"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rewindstack/rewind/corefile"
	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/sframe"
	"github.com/rewindstack/rewind/stacks"
	"github.com/rewindstack/rewind/unwind"
)

func TestMain(m *testing.M) { os.Exit(fixture.Main(m)) }

// sframeVariant builds the fixture programs without frame pointers and with
// SFrame (gas --gsframe: v1 with bookworm's binutils), so that the frames
// of the program can only come from SFrame or CFI.
var sframeVariant = fixture.Variant{Name: "O2-nofp-sframe", Flags: []string{"-O2", "-fomit-frame-pointer", "-Wa,--gsframe"}}

type program struct {
	name string
	args []string
}

func (p program) String() string { return strings.Join(append([]string{p.name}, p.args...), "-") }

// TestCoreMatchesEuStack walks every thread of cores of the fixture
// programs built with SFrame, with SFrame first, then CFI (the system libc
// has no .sframe) and frame pointers, and checks the physical frames are
// exactly eu-stack's. Every frame whose callee lies in an object with an
// SFrame row for the callee's PC must have been produced by SFrame; the
// test counts them.
func TestCoreMatchesEuStack(t *testing.T) {
	var total, bySFrame atomic.Int64
	programs := []program{{"threads", nil}, {"recurse", nil}, {"recurse", []string{"2000"}}, {"signal", nil}, {"signal", []string{"busy"}}, {"plt", nil}, {"demo", nil}}
	t.Run("group", func(t *testing.T) {
		for _, p := range programs {
			p := p
			t.Run(p.String(), func(t *testing.T) {
				t.Parallel()
				exe := fixture.Build(t, p.name, sframeVariant)
				proc := fixture.Start(t, exe, p.args...)
				core := fixture.Gcore(t, proc)
				n, s := compareCore(t, core, exe)
				total.Add(int64(n))
				bySFrame.Add(int64(s))
			})
		}
	})
	t.Logf("%d frames in all, %d of them produced by SFrame", total.Load(), bySFrame.Load())
	if !t.Failed() && bySFrame.Load() == 0 && total.Load() > 0 {
		t.Error("no frame came from SFrame")
	}
}

func compareCore(t *testing.T, core, exe string) (frames, bySFrame int) {
	return compareCoreWith(t, core, exe, "", unwind.SFrameSection, false)
}

// compareCoreWith walks every thread of core with SFrame sections from
// section (then the CFI table, then frame pointers), requires eu-stack's
// frames, and checks that SFrame produced every frame whose callee it
// covers (signal frames aside). label prefixes messages; with
// requireSection every object with CFI must have a section.
func compareCoreWith(t *testing.T, core, exe, label string, section func(*target.Module) (*sframe.Section, error), requireSection bool) (frames, bySFrame int) {
	ref, err := fixture.EuStackCore(t, core, exe)
	if err != nil {
		t.Fatalf("eu-stack: %v", err)
	}
	c, err := corefile.Open(core)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tg, err := c.Target(&target.Objects{}, exe)
	if err != nil {
		t.Fatal(err)
	}
	u := &unwind.Unwinder{
		Steppers: []unwind.Stepper{unwind.SFrame{Source: section}, unwind.CFITable{}, unwind.FramePointers{}},
		MaxDepth: 100000,
	}
	walks := stacks.Walk(tg, stacks.Options{Unwinder: u})
	if len(walks) != len(ref) {
		t.Errorf("%score has %d threads, eu-stack printed %d", label, len(walks), len(ref))
	}
	for _, want := range ref {
		var got *unwind.Stack
		for i := range walks {
			if walks[i].TID == want.TID {
				got = &walks[i].Stack
			}
		}
		if got == nil {
			t.Errorf("%sthread %d missing", label, want.TID)
			continue
		}
		same := len(got.Frames) == len(want.Frames)
		for i := 0; same && i < len(want.Frames); i++ {
			same = got.Frames[i].PC == want.Frames[i].PC
		}
		if !same {
			t.Errorf("%sthread %d differs from eu-stack (end %s %s):\n%s", label, want.TID, got.End, got.Detail, sideBySide(got, want))
			continue
		}
		frames += len(got.Frames)
		for i := 1; i < len(got.Frames); i++ {
			if got.Frames[i].Method == unwind.MethodSFrame {
				bySFrame++
				continue
			}
			// The callee: is it covered by an SFrame row that is not a
			// signal frame? Then SFrame must have produced this frame.
			callee := &got.Frames[i-1]
			m := tg.Space.Find(callee.LookupPC())
			if m == nil || m.Module == nil {
				continue
			}
			sec, err := section(m.Module)
			if errors.Is(err, sframe.ErrNoCFI) {
				continue
			}
			if err != nil || (sec == nil && requireSection) {
				t.Errorf("%sno section for %s: %v", label, m.Module.Path, err)
				continue
			}
			if sec == nil {
				continue
			}
			if row, ok := sec.Lookup(callee.LookupPC() - m.Bias); ok && !row.Signal {
				t.Errorf("%sthread %d frame %d (%#x) came from %s although its callee at %#x has SFrame row %v",
					label, want.TID, i, got.Frames[i].PC, got.Frames[i].Method, callee.PC, row)
			}
		}
	}
	return frames, bySFrame
}

func sideBySide(got *unwind.Stack, want fixture.Stack) string {
	var b strings.Builder
	n := max(len(got.Frames), len(want.Frames))
	for i := 0; i < n; i++ {
		g, w := "", ""
		if i < len(got.Frames) {
			g = fmt.Sprintf("%#x [%s]", got.Frames[i].PC, got.Frames[i].Method)
		}
		if i < len(want.Frames) {
			w = fmt.Sprintf("%#x %s", want.Frames[i].PC, want.Frames[i].Func)
		}
		mark := " "
		if i >= len(got.Frames) || i >= len(want.Frames) || got.Frames[i].PC != want.Frames[i].PC {
			mark = "≠"
		}
		fmt.Fprintf(&b, "  %s #%-3d %-32s %s\n", mark, i, g, w)
	}
	return b.String()
}
