package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/perftest"
)

// spinPerfData is perf's recording of profiles/testdata/spin, made on
// another machine: reporting it warns about the files it names.
const spinPerfData = "../../profiles/testdata/spin/perf.data"

// runClosedStderr runs rewind with stderr a pipe whose reader is gone,
// as in rewind record 2>&1 | head -1 once head exited.
func runClosedStderr(t *testing.T, stdin string, args ...string) error {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	defer w.Close()
	cmd := exec.Command(rewindBin, args...)
	cmd.Stderr = w
	if stdin != "" {
		f, err := os.Open(stdin)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd.Stdin = f
	}
	return cmd.Run()
}

// TestBrokenStderrWritesProfile (issue 26 item 3): record and report
// whose stderr is a closed pipe still write the profile, and exit 0.
func TestBrokenStderrWritesProfile(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "report.folded")
	if err := runClosedStderr(t, "", "report", "-o", out, spinPerfData); err != nil {
		t.Errorf("report with a closed stderr: %v", err)
	}
	if st, err := os.Stat(out); err != nil || st.Size() == 0 {
		t.Errorf("report with a closed stderr wrote no profile: %v", err)
	}
	perftest.RequirePerfEvent(t)
	out = filepath.Join(dir, "record.folded")
	if err := runClosedStderr(t, "", "record", "-o", out, "--", "sh", "-c", "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done"); err != nil {
		t.Errorf("record with a closed stderr: %v", err)
	}
	if _, err := os.Stat(out); err != nil {
		t.Errorf("record with a closed stderr wrote no profile: %v", err)
	}
}

// TestReportStdin: report - reads perf.data from standard input, a file
// or a pipe (perf record -o - writes pipe mode; here the same file piped).
func TestReportStdin(t *testing.T) {
	dir := t.TempDir()
	ref := filepath.Join(dir, "ref.folded")
	_, errOut, code := run(t, "report", "-q", "-o", ref, spinPerfData)
	want, err := os.ReadFile(ref)
	if code != 0 || err != nil || len(want) == 0 {
		t.Fatalf("report of the file: exit %d, %v\n%s", code, err, errOut)
	}
	for _, how := range []string{"file", "pipe"} {
		f, err := os.Open(spinPerfData)
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, how+".folded")
		cmd := exec.Command(rewindBin, "report", "-q", "-o", out, "-")
		var e strings.Builder
		cmd.Stderr = &e
		cmd.Stdin = f
		if how == "pipe" {
			cmd.Stdin = struct{ io.Reader }{f} // not an *os.File: exec copies it through a pipe
		}
		err = cmd.Run()
		f.Close()
		got, _ := os.ReadFile(out)
		if err != nil || string(got) != string(want) {
			t.Errorf("report - from a %s: %v\nstderr: %s\ngot:\n%s\nwant:\n%s", how, err, e.String(), got, want)
		}
	}
	// Garbage on standard input is named as such.
	cmd := exec.Command(rewindBin, "report", "-q", "-o", filepath.Join(dir, "x.folded"), "-")
	cmd.Stdin = strings.NewReader("not a perf.data file at all")
	b, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(b), "standard input") {
		t.Errorf("report - of garbage: %v\n%s", err, b)
	}
}

// TestUsageErrors: an unknown command, a bad flag and a missing
// subcommand all exit 2, and a subcommand's usage prints as lines (not
// escaped newlines).
func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"frobnicate"},
		{"dump", "--frobnicate"},
		{"record", "--frobnicate", "--", "true"},
		{"report", "--frobnicate", "perf.data"},
		{"dump", "1", "--max-pause", "soon"},
		{"sframe"},
		{"goshadow"},
	} {
		_, errOut, code := run(t, args...)
		if code != 2 {
			t.Errorf("rewind %q: exit %d, want 2\n%s", args, code, errOut)
		}
		if strings.Contains(errOut, `\x0a`) || strings.Contains(errOut, "panic") {
			t.Errorf("rewind %q: stderr %q", args, errOut)
		}
	}
	_, errOut, _ := run(t, "sframe")
	if !strings.Contains(errOut, "\n       rewind sframe gen IN -o OUT") {
		t.Errorf("rewind sframe: usage not printed as lines:\n%s", errOut)
	}
}

// TestHelpCommand: rewind help CMD prints what rewind CMD --help does.
func TestHelpCommand(t *testing.T) {
	for _, cmd := range []string{"dump", "record", "report", "agent", "sframe"} {
		want, _, code := run(t, cmd, "--help")
		got, errOut, code2 := run(t, "help", cmd)
		if code != 0 || code2 != 0 || got != want || got == "" {
			t.Errorf("rewind help %s: exit %d, %d\n%s\ngot:\n%s\nwant:\n%s", cmd, code, code2, errOut, got, want)
		}
	}
	if _, _, code := run(t, "help", "frobnicate"); code != 2 {
		t.Errorf("rewind help frobnicate: exit %d, want 2", code)
	}
}

// TestMaxPauseValues: dump --max-pause takes the documented bare -1 and
// 0, and a number without its unit is told to have one.
func TestMaxPauseValues(t *testing.T) {
	for _, v := range []string{"-1", "0", "5ms", "1s"} {
		_, errOut, code := run(t, "dump", "--core", "/nonexistent/core", "--max-pause", v)
		if code != 1 || strings.Contains(errOut, "max-pause") || !strings.Contains(errOut, "/nonexistent/core") {
			t.Errorf("dump --max-pause %s: exit %d, stderr %q", v, code, errOut)
		}
	}
	_, errOut, code := run(t, "dump", "--core", "/nonexistent/core", "--max-pause", "10")
	if code != 2 || !strings.Contains(errOut, "a duration such as 10ms") {
		t.Errorf("dump --max-pause 10: exit %d, stderr %q", code, errOut)
	}
}

// TestRecordNoSuchProcess: record -p of a process that does not exist
// says so, as dump does.
func TestRecordNoSuchProcess(t *testing.T) {
	_, errOut, code := run(t, "record", "-p", "999999999")
	if code != 1 || !strings.Contains(errOut, "no such process: 999999999") {
		t.Errorf("record -p 999999999: exit %d, stderr %q", code, errOut)
	}
}

// TestReportPerfPipe: perf record -o - streams pipe mode into rewind
// report -, whose stacks unwind to their roots as from a file.
func TestReportPerfPipe(t *testing.T) {
	perf := perftest.RequirePerf(t)
	exe := perftest.BuildCPU(t, "-fomit-frame-pointer")
	dir := t.TempDir()
	out := filepath.Join(dir, "pipe.folded")
	rec := exec.Command(perf, "record", "-q", "-e", "cpu-clock", "-F", "499", "--call-graph", "dwarf", "-o", "-", "--", exe, "0.5", "1")
	rep := exec.Command(rewindBin, "report", "-q", "-o", out, "-")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	rec.Stdout, rep.Stdin = w, r
	var recErr, repErr strings.Builder
	rec.Stderr, rep.Stderr = &recErr, &repErr
	err = rec.Start()
	if err == nil {
		err = rep.Start()
	}
	// Only the two commands hold the pipe now: if one ends, the other
	// sees it.
	r.Close()
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Wait(); err != nil {
		rep.Wait()
		t.Skipf("perf record -o - cannot run here: %v\n%s", err, recErr.String())
	}
	if err := rep.Wait(); err != nil {
		t.Fatalf("rewind report -: %v\n%s", err, repErr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	checkHashBlockStacks(t, b)
}
