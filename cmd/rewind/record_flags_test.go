package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRecordFlagValidation runs the binary: every bad flag is refused with
// one line on stderr, before a command runs and without the help text.
func TestRecordFlagValidation(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	isDir := filepath.Join(dir, "out.html")
	if err := os.Mkdir(isDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-F", "0", "-d", "1s"}, "greater than 0"},
		{[]string{"-F", "-5"}, "greater than 0"},
		{[]string{"-F", "100000000"}, "kernel's limit"},
		{[]string{"-d", "0"}, "greater than 0"},
		{[]string{"-d", "-3"}, "greater than 0"},
		{[]string{"-d", "soon"}, "bad duration"},
		{[]string{"-o", "/nonexistent/x.html"}, "/nonexistent"},
		{[]string{"-o", "/proc/x.html"}, "cannot write in /proc"},
		{[]string{"-o", isDir}, "is a directory"},
	} {
		args := append([]string{"record"}, tc.args...)
		args = append(args, "--", "touch", marker)
		out, errOut, code := run(t, args...)
		if code == 0 || code == 2 && strings.Contains(errOut, "panic") {
			t.Errorf("rewind %q: exit %d", args, code)
		}
		if strings.Contains(errOut, "panic") || strings.Contains(errOut, "Flags:") || strings.Contains(out, "Flags:") {
			t.Errorf("rewind %q: panic or help dump:\n%s%s", args, out, errOut)
		}
		if !strings.Contains(errOut, tc.want) {
			t.Errorf("rewind %q: stderr %q lacks %q", args, errOut, tc.want)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("rewind %q ran the command before refusing its flags", args)
		}
	}
}

// TestReportOutputChecked: report refuses an output it cannot write
// before reading the perf.data file (which can take a while).
func TestReportOutputChecked(t *testing.T) {
	data := filepath.Join(t.TempDir(), "perf.data")
	if err := os.WriteFile(data, []byte("not a perf.data file"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, o := range []string{"/nonexistent/x.folded", "/proc/x.folded"} {
		_, errOut, code := run(t, "report", "-o", o, data)
		if code == 0 || !strings.Contains(errOut, "-o "+o) || strings.Contains(errOut, "perf.data file") {
			t.Errorf("report -o %s: exit %d, want the output refused first, stderr:\n%s", o, code, errOut)
		}
	}
}

func TestDurationFlagBareSeconds(t *testing.T) {
	var d durationFlag
	if err := d.Set("5"); err != nil || d.d != 5*time.Second {
		t.Errorf("-d 5 = %v, %v; want 5s", d.d, err)
	}
	if err := d.Set("1.5s"); err != nil || d.d != 1500*time.Millisecond {
		t.Errorf("-d 1.5s = %v, %v", d.d, err)
	}
}

// TestHelpAndVersion: --help of every command is an answer (stdout, exit
// 0); --version names the Go version and the revision.
func TestHelpAndVersion(t *testing.T) {
	for _, c := range [][]string{{"sframe", "--help"}, {"record", "--help"}, {"report", "--help"}, {"dump", "--help"}, {"sframe", "gen", "--help"}, {"sframe", "dump", "--help"}} {
		out, errOut, code := run(t, c...)
		if code != 0 || out == "" || !strings.HasSuffix(out, "\n") {
			t.Errorf("rewind %q: exit %d, stdout %q (want it to end with a newline), stderr %q", c, code, out, errOut)
		}
	}
	out, _, code := run(t, "--version")
	if code != 0 || !strings.Contains(out, "go1.") || !strings.Contains(out, "revision") {
		t.Errorf("rewind --version: exit %d, %q", code, out)
	}
}
