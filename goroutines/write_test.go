package goroutines

import (
	"bytes"
	"strings"
	"testing"

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
