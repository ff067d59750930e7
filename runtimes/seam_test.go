package runtimes_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/procmaps"
	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/output"
	"github.com/rewindstack/rewind/profiles"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/runtimes"
	"github.com/rewindstack/rewind/stacks"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// toy is a runtime written in a test file, as a new runtime's package
// would write it: it finds itself by its executable among the mappings
// and says that the fixture's main thread runs one interpreted frame in
// its activation of main, the toy interpreter's entry.
type toy struct{ exe string }

func (toy) Name() string  { return "toy" }
func (toy) Usage() string { return "do not show the toy frames" }

func (r toy) Live(pid int, maps []target.Mapping) (runtimes.Live, error) {
	for _, m := range maps {
		if m.Path == r.exe {
			return &toyLive{pid: pid}, nil
		}
	}
	return nil, nil
}

func (toy) Core(*target.Target, func(string)) {}

// toyLive reads nothing in the pause: its frames are fixed.
type toyLive struct {
	pid    int
	during int
}

func (l *toyLive) During(*live.Reader) { l.during++ }

func (l *toyLive) Attach(tg *target.Target, warn func(string)) {
	for i := range tg.Contexts {
		if c := &tg.Contexts[i]; c.Kind == target.KindThread && c.TID == l.pid {
			c.SetInterp(target.InterpStack{Entry: "main", Frames: []target.InterpFrame{
				{Function: "script_main", File: "app.toy", Line: 7, Method: "toy"}}})
		}
	}
}

// TestRegisteredRuntime: a runtime registered from a test file has its
// frames in a dump made the way the commands make one (each registered
// runtime found before the capture, read in its pause, attached to the
// target, the stacks spliced) and in a profile of a sample of the same
// stack, with no change anywhere else.
func TestRegisteredRuntime(t *testing.T) {
	exe := fixture.Build(t, "threads", fixture.Variants[0])
	runtimes.Register(toy{exe: exe})
	defer runtimes.Unregister("toy")
	proc := fixture.Start(t, exe)

	maps, err := procmaps.Read(proc.PID)
	if err != nil {
		t.Fatal(err)
	}
	var readers []runtimes.Live
	for _, r := range runtimes.All() {
		if l, _ := r.Live(proc.PID, maps); l != nil {
			readers = append(readers, l)
		}
	}
	snap, err := live.Capture(proc.PID, live.Options{During: runtimes.During(nil, readers)})
	if err != nil {
		t.Fatal(err)
	}
	tg := snap.Target(&target.Objects{}, nil)
	for _, l := range readers {
		if tl, ok := l.(*toyLive); ok && tl.during == 0 {
			t.Error("the toy runtime's During did not run in the pause")
		}
		l.Attach(tg, func(s string) { t.Log(s) })
	}
	sym := &symbolize.Symbolizer{}
	walks := stacks.Walk(tg, stacks.Options{Unwinder: unwind.NewAuto()})
	rep := stacks.Report(tg, walks, sym)
	th := mainThread(t, rep, proc.PID)
	var text bytes.Buffer
	if err := output.WriteText(&text, &output.Report{Threads: []output.Thread{*th}}); err != nil {
		t.Fatal(err)
	}
	if !entryAfter(th.Frames) || !strings.Contains(text.String(), "script_main app.toy:7 [toy]") {
		t.Errorf("dump: no toy frame before main:\n%s", text.String())
	}

	// A profile's sample of the main thread's stack, with the frames the
	// runtime attached.
	col := profiles.NewCollector(regs.AMD64)
	if err := col.AddProcess(proc.PID); err != nil {
		t.Fatal(err)
	}
	var pcs []uint64
	var interp []target.InterpStack
	for _, w := range walks {
		if w.TID == proc.PID && w.Context != nil {
			for _, f := range w.Stack.Frames {
				pcs = append(pcs, f.PC)
			}
			interp = w.Context.Interp
		}
	}
	col.AddStack(proc.PID, proc.PID, 1, 1, 1, pcs, nil, "outermost").Interp = interp
	b := profiles.NewBuilder(col, profiles.Options{})
	b.Add(col.Samples())
	p := b.Profile()
	if len(p.Stacks) != 1 {
		t.Fatalf("%d profile stacks, want 1", len(p.Stacks))
	}
	var names []string
	for _, l := range p.Stacks[0].Locations {
		names = append(names, l.Lines[len(l.Lines)-1].Function)
	}
	if got := strings.Join(names, " "); !strings.Contains(got, "script_main main") {
		t.Errorf("profile stack %s: no toy frame before main", got)
	}
}

// mainThread is the report's thread tid.
func mainThread(t *testing.T, rep *output.Report, tid int) *output.Thread {
	t.Helper()
	for i := range rep.Threads {
		if rep.Threads[i].TID == tid {
			return &rep.Threads[i]
		}
	}
	t.Fatalf("no thread %d in the report", tid)
	return nil
}

// entryAfter reports whether an interpreted toy frame comes just before
// (leafward of) the physical main frame.
func entryAfter(fs []output.Frame) bool {
	for i := 1; i < len(fs); i++ {
		if fs[i].Function == "main" && !fs[i].Inlined && fs[i-1].Interpreted && fs[i-1].Function == "script_main" {
			return true
		}
	}
	return false
}
