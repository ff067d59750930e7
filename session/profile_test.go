package session_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/session"
)

// TestMethods: the chosen method comes first, then the fidelity table's
// others, once each, every one bounded by the depth given.
func TestMethods(t *testing.T) {
	ms, err := session.Methods("fp", 7)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range ms {
		names = append(names, m.Name)
		if m.Unwinder.MaxDepth != 7 {
			t.Errorf("%s: MaxDepth %d, want 7", m.Name, m.Unwinder.MaxDepth)
		}
	}
	if got := strings.Join(names, ","); got != "fp,auto,dwarf,sframe" {
		t.Errorf("methods %s, want fp,auto,dwarf,sframe", got)
	}
	if _, err := session.Methods("bogus", 7); err == nil || !strings.Contains(err.Error(), `unknown --method "bogus"`) {
		t.Errorf("Methods(bogus): %v", err)
	}
}

// TestCheckRecording refuses what the kernel would (a stack copy that is
// not a multiple of 8) and a process that is not there.
func TestCheckRecording(t *testing.T) {
	if err := session.CheckRecording(&session.Recording{StackSize: 12}); err == nil {
		t.Error("stack size 12 accepted")
	}
	err := session.CheckRecording(&session.Recording{StackSize: 8 << 10, PID: 1<<31 - 2})
	if err == nil || !strings.Contains(err.Error(), "no such process") {
		t.Errorf("a process that does not exist: %v", err)
	}
	if err := session.CheckRecording(&session.Recording{StackSize: 8 << 10, PID: os.Getpid()}); err != nil {
		t.Error(err)
	}
}

// TestReport writes the profile of a perf.data fixture and says so, as
// rewind report does.
func TestReport(t *testing.T) {
	out := filepath.Join(t.TempDir(), "p.folded")
	var log bytes.Buffer
	var phases []string
	opt := session.ReportOptions{Profile: session.ProfileOptions{Method: "auto", MaxDepth: 1024, Fidelity: true,
		Output: session.Output{Path: out}, Log: &log, Phase: func(p string) { phases = append(phases, p) }}}
	if err := session.Report("../profiles/testdata/spin/perf.data", opt); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) == 0 {
		t.Error("empty profile")
	}
	if !strings.Contains(log.String(), "stack fidelity") || !strings.Contains(log.String(), "rewind: wrote "+out+" (") {
		t.Errorf("log:\n%s", log.String())
	}
	if got := strings.Join(phases, ","); got != "read,unwind+symbolize" {
		t.Errorf("phases %s", got)
	}
}
