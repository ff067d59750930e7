package traceback

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/maruel/panicparse/v2/stack"

	"github.com/rewindstack/rewind/output"
)

// TestWriteEscapes: every string the text outputs print comes from the
// target (function and file names of its binary, the module's path, a
// read error naming a file, notes), so a control byte in one is printed
// as \xNN, never raw: a hostile program cannot drive the operator's
// terminal through `rewind dump --goroutines`. (The wait reasons are
// the target's strings too: its runtime.waitReasonStrings.) A binary built in a
// directory named "g\x1b[31mX" puts that name in every file name of its
// package.
func TestWriteEscapes(t *testing.T) {
	const evil = "\x1b]0;pw\x07\x1b[2J\u009b"
	rep := &Report{
		Goroutines: []Entry{{
			ID: 1, Status: "waiting", WaitReason: "sleep" + evil,
			Frames: []output.Frame{
				{Function: "main.f" + evil, File: "/src/g" + evil + "/main.go", Line: 7, Offset: 0x1d},
				{PC: 0x401000, Module: "/bin/p" + evil},
			},
			CreatedBy: &Creator{Function: "main.main" + evil, File: "/src/" + evil + ".go", Line: 3, Goroutine: 1},
			err:       "reading /tmp/" + evil + ": EOF",
		}},
		Notes: []string{"note about /tmp/" + evil},
	}
	for name, write := range map[string]func(*bytes.Buffer) error{
		"text":    func(b *bytes.Buffer) error { return WriteText(b, rep) },
		"grouped": func(b *bytes.Buffer) error { return WriteGrouped(b, rep) },
	} {
		var b bytes.Buffer
		if err := write(&b); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		for _, raw := range []string{"\x1b", "\x07", "\u009b"} {
			if strings.Contains(out, raw) {
				t.Errorf("%s: raw %q in the output:\n%q", name, raw, out)
			}
		}
		for _, want := range []string{`goroutine 1 [sleep\x1b]0;pw`, `main.f\x1b]0;pw\x07\x1b[2J\xc2\x9b(...)`, `/src/g\x1b]0;pw`, `/bin/p\x1b]0;pw`,
			`created by main.main\x1b]0;pw`, `reading /tmp/\x1b]0;pw`, `# note: note about /tmp/\x1b]0;pw`} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: %q missing from the output:\n%s", name, want, out)
			}
		}
	}
}

// labelReport is one labelled goroutine that has waited 3 minutes, and an
// unlabelled one with the same stack, built by Go version v.
func labelReport(v string) *Report {
	frames := []output.Frame{{Function: "main.f", File: "/src/main.go", Line: 7, Offset: 0x1d}}
	return &Report{GoVersion: v, Goroutines: []Entry{
		{ID: 7, Status: "waiting", WaitReason: "chan receive", WaitMinutes: 3, Frames: frames,
			Labels: map[string]string{"zone": "eu-west", "req": "r0", "path": "/a]b", "name": "caf\u00e9", "bad": "\xff", "e": ""}},
		{ID: 8, Status: "waiting", WaitReason: "chan receive", WaitMinutes: 3, Frames: frames, Labels: map[string]string{}},
	}}
}

// TestLabelHeaders: by default no header carries labels, so that
// panicparse reads every goroutine whole (a "]" in a label ends its
// header, and Go 1.26's syntax hides the wait minutes from it); with
// labels, each Go version's own syntax (the live comparison with the
// programs' own tracebacks is TestPanicparseReadsDumps).
func TestLabelHeaders(t *testing.T) {
	for _, c := range []struct{ version, want string }{
		{"go1.26.8", `goroutine 7 [chan receive, 3 minutes labels:{"bad": "\ufffd", "e": "", "name": "caf\u00e9", "path": "/a]b", "req": "r0", "zone": "eu-west"}]:`},
		{"go1.25.3", `goroutine 7 [chan receive, 3 minutes labels:{"bad": "\ufffd", "e": "", "name": "caf\u00e9", "path": "/a]b", "req": "r0", "zone": "eu-west"}]:`},
		{"go1.27.3", `goroutine 7 [chan receive, 3 minutes] {bad: "\xff", e: , name: "caf\u00e9", path: "/a]b", req: r0, zone: "eu-west"}:`},
		{"go1.27rc1", `goroutine 7 [chan receive, 3 minutes] {bad: "\xff", e: , name: "caf\u00e9", path: "/a]b", req: r0, zone: "eu-west"}:`},
		{"devel go1.28-0123abcd", `goroutine 7 [chan receive, 3 minutes] {bad: "\xff", e: , name: "caf\u00e9", path: "/a]b", req: r0, zone: "eu-west"}:`},
	} {
		var b bytes.Buffer
		if err := (TextOptions{Labels: true}).WriteText(&b, labelReport(c.version)); err != nil {
			t.Fatal(err)
		}
		if got, _, _ := strings.Cut(b.String(), "\n"); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.version, got, c.want)
		}
		if !strings.Contains(b.String(), "\ngoroutine 8 [chan receive, 3 minutes]:\n") {
			t.Errorf("%s: an unlabelled goroutine's header:\n%s", c.version, b.String())
		}
	}
	var b bytes.Buffer
	if err := WriteText(&b, labelReport("go1.26.8")); err != nil {
		t.Fatal(err)
	}
	snap, _, err := stack.ScanSnapshot(&b, io.Discard, &stack.Opts{})
	if snap == nil || len(snap.Goroutines) != 2 {
		t.Fatalf("panicparse read %v (%v)", snap, err)
	}
	for _, g := range snap.Goroutines {
		if g.State != "chan receive" || g.SleepMin != 3 {
			t.Errorf("panicparse read goroutine %d as [%s, %d minutes]", g.ID, g.State, g.SleepMin)
		}
	}
}

// TestGroupedJSON: --group --json folds goroutines too, labels counting.
func TestGroupedJSON(t *testing.T) {
	rep := labelReport("go1.27.3")
	rep.Goroutines = append(rep.Goroutines, rep.Goroutines[1])
	rep.Goroutines[2].ID, rep.Goroutines[2].WaitMinutes = 9, 5
	var b bytes.Buffer
	if err := WriteGroupedJSON(&b, rep); err != nil {
		t.Fatal(err)
	}
	var doc struct{ Groups []Group }
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Groups) != 2 || doc.Groups[0].Count != 2 || fmt.Sprint(doc.Groups[0].IDs) != "[8 9]" ||
		doc.Groups[0].WaitMinutesMin != 3 || doc.Groups[0].WaitMinutesMax != 5 || doc.Groups[1].Labels["req"] != "r0" {
		t.Errorf("groups:\n%s", b.String())
	}
	b.Reset()
	if err := WriteGrouped(&b, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "goroutine 7 [chan receive, 3 minutes, 3 goroutines: 7 8 9]:\n") {
		t.Errorf("without labels the three fold into one group:\n%s", b.String())
	}
}
