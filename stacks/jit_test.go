package stacks_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/output"
	"github.com/rewindstack/rewind/stacks"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// TestJITPerfMap dumps a thread blocked in generated code: its frame is
// named from the process's perf map exactly, marked JIT ("jit": true in
// JSON, [jit] in text), and the walk goes on to the C caller by the frame
// record the generated code keeps.
func TestJITPerfMap(t *testing.T) {
	exe := fixture.BuildC(t, fixture.JITSource)
	proc := fixture.Start(t, exe, "park")
	t.Cleanup(func() { fixture.RemovePerfMap(proc.PID) })
	rep, fs, names := dumpOne(t, proc.PID, t.Log)
	if len(fs) < 3 || fs[0].Function != fixture.JITName || !fs[0].JIT || fs[0].Module != "" {
		t.Fatalf("frames %q; want the generated code named from the perf map first, marked JIT: %+v", names, fs)
	}
	if fs[1].Function != "run" && fs[1].Function != "main" {
		t.Errorf("frames %q: the generated code's caller is not the C program's", names)
	}
	var text, js strings.Builder
	output.WriteText(&text, rep)
	output.WriteJSON(&js, rep)
	if !strings.Contains(text.String(), " JS:*jsHot /app.js:2:15+0xb [jit] [") {
		t.Errorf("text has no [jit] frame:\n%s", text.String())
	}
	if !strings.Contains(js.String(), `"jit": true`) || strings.Count(js.String(), `"jit": `) != 1 {
		t.Errorf("JSON: want one \"jit\": true:\n%s", js.String())
	}
}

// TestJITDump dumps a thread blocked in generated code named in the
// jitdump the process maps (jit-PID.dump, and no perf map): the frame is
// named from the dump's code load, with the file:line of its debug info,
// as perf inject --jit names it.
func TestJITDump(t *testing.T) {
	exe := fixture.BuildC(t, fixture.JITSource)
	cmd := exec.Command(exe, "dump")
	cmd.Dir = t.TempDir() // the jitdump dies with it
	proc := fixture.StartCmd(t, cmd)
	_, fs, names := dumpOne(t, proc.PID, func(a ...any) { t.Errorf("warning: %s", a...) })
	// The thread is parked after the syscall, past the code's 4 first
	// bytes: /app.js:3 by the debug info.
	if len(fs) < 3 || fs[0].Function != fixture.JITName || !fs[0].JIT || fs[0].File != "/app.js" || fs[0].Line != 3 {
		t.Fatalf("frames %q; want the generated code named from the jitdump first, at /app.js:3: %+v", names, fs[0])
	}
	if fs[1].Function != "run" && fs[1].Function != "main" {
		t.Errorf("frames %q: the generated code's caller is not the C program's", names)
	}
}

// dumpOne captures and unwinds the one thread of process pid (warnings
// to warn), returning the report, its frames and their names.
func dumpOne(t *testing.T, pid int, warn func(...any)) (*output.Report, []output.Frame, []string) {
	t.Helper()
	snap, err := live.Capture(pid, live.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tg := snap.Target(&target.Objects{}, func(s string) { warn(s) })
	u, _ := unwind.ByName("auto")
	rep := stacks.Unwind(tg, stacks.Options{Unwinder: u}, &symbolize.Symbolizer{Inlines: true})
	if len(rep.Threads) != 1 {
		t.Fatalf("%d threads", len(rep.Threads))
	}
	fs := rep.Threads[0].Frames
	var names []string
	for _, f := range fs {
		names = append(names, f.Name())
	}
	return rep, fs, names
}
