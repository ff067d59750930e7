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

// TestReportTruncated: a perf.data file cut short gets the profile of
// the records before the cut (10,000 bytes: 3 samples), with a warning,
// and the read's error.
func TestReportTruncated(t *testing.T) {
	b, err := os.ReadFile("../profiles/testdata/spin/perf.data")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	in, out := filepath.Join(dir, "cut.data"), filepath.Join(dir, "p.folded")
	if err := os.WriteFile(in, b[:10000], 0o644); err != nil {
		t.Fatal(err)
	}
	var warnings []string
	opt := session.ReportOptions{Profile: session.ProfileOptions{Method: "auto", MaxDepth: 1024, Quiet: true,
		Output: session.Output{Path: out}, Warn: func(w string) { warnings = append(warnings, w) }}}
	err = session.Report(in, opt)
	if err == nil {
		t.Fatal("no error for a truncated file")
	}
	if st, serr := os.Stat(out); serr != nil || st.Size() == 0 {
		t.Errorf("no profile of the records before the cut: %v", serr)
	}
	said := strings.Join(warnings, "\n")
	if !strings.Contains(said, err.Error()+"; writing the profile of the records before it") {
		t.Errorf("warnings:\n%s\nerror: %v", said, err)
	}
}
