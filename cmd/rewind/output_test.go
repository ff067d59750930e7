package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestDefaultOutputKeepsEarlierProfiles checks that the default output
// name is never that of an existing file: two reports within one second
// must both be kept.
func TestDefaultOutputKeepsEarlierProfiles(t *testing.T) {
	t.Chdir(t.TempDir())
	now := time.Now()
	// The file of this second and the next, and their first
	// alternatives, in case the second changes during the test.
	for _, at := range []time.Time{now, now.Add(time.Second)} {
		base := "rewind-" + at.Format("20060102-150405")
		for _, name := range []string{base + ".html", base + "-2.html"} {
			if err := os.WriteFile(name, []byte("earlier"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	out, err := outputPath("", "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "rewind-") || !strings.HasSuffix(out, "-3.html") {
		t.Errorf("default output %q, want rewind-TIME-3.html", out)
	}
	if _, err := os.Lstat(out); err == nil {
		t.Errorf("default output %q exists", out)
	}
	if got, err := outputPath("x.folded", ""); err != nil || got != "x.folded" {
		t.Errorf("outputPath(x.folded) = %q, %v", got, err)
	}
}

// spinData is a small committed perf.data file report can read.
const spinData = "../../profiles/testdata/spin/perf.data"

// TestConcurrentReportsKeepAllProfiles runs reports without -o at once in
// one directory: they pick the same default name, and each must still
// write its own file (a check then rename lost some).
func TestConcurrentReportsKeepAllProfiles(t *testing.T) {
	data, err := filepath.Abs(spinData)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	const n = 12
	outs := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			cmd := exec.Command(rewindBin, "report", "-q", data)
			cmd.Dir = dir
			b, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("report: %v\n%s", err, b)
			}
			outs[i] = string(b)
		})
	}
	wg.Wait()
	wrote := regexp.MustCompile(`rewind: wrote (\S+)`)
	seen := map[string]bool{}
	for _, o := range outs {
		m := wrote.FindStringSubmatch(o)
		if m == nil {
			t.Errorf("no 'wrote' line:\n%s", o)
			continue
		}
		if seen[m[1]] {
			t.Errorf("two reports wrote %s", m[1])
		}
		seen[m[1]] = true
	}
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	if len(names) != n {
		t.Errorf("%d reports left %d files: %q", n, len(names), names)
	}
}

// TestReportOutputRefusesSpecialFiles: report -o names a symbolic link
// or a FIFO: refused before the perf.data file is read, the link's
// target untouched, and nothing blocks.
func TestReportOutputRefusesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target.folded")
	if err := os.WriteFile(target, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.folded")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.folded")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, o := range []string{link, fifo} {
		_, errOut, code := run(t, "report", "-o", o, spinData)
		if code == 0 || !strings.Contains(errOut, o) || !strings.Contains(errOut, "not a regular file") {
			t.Errorf("report -o %s: exit %d, stderr:\n%s", o, code, errOut)
		}
	}
	if b, _ := os.ReadFile(target); string(b) != "precious" {
		t.Errorf("link target overwritten: %q", b)
	}
	if st, err := os.Stat(target); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("link target's mode: %v %v", st.Mode(), err)
	}
}

// TestReportOutputKeepsOwner: root's report -o over another user's 0600
// file leaves that user's 0600 file, not a root-owned one of the umask's
// mode.
func TestReportOutputKeepsOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another user")
	}
	out := filepath.Join(t.TempDir(), "theirs.folded")
	if err := os.WriteFile(out, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(out, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := run(t, "report", "-q", "-o", out, spinData); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var st unix.Stat_t
	if err := unix.Stat(out, &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 65534 || st.Gid != 65534 || st.Mode&0o7777 != 0o600 {
		t.Errorf("uid %d gid %d mode %#o, want 65534 65534 0600", st.Uid, st.Gid, st.Mode&0o7777)
	}
	if b, _ := os.ReadFile(out); string(b) == "old" {
		t.Errorf("not rewritten")
	}
}

// TestReportOutputDevNullAndStdout: -o /dev/null is accepted and leaves
// /dev/null a device; -o - writes the profile to standard output in the
// --format given, and refuses to guess one (issue 38 item 6).
func TestReportOutputDevNullAndStdout(t *testing.T) {
	data, err := filepath.Abs(spinData)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(rewindBin, "report", "-q", "-o", os.DevNull, data).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "discarded the profile") {
		t.Fatalf("report -o /dev/null: %v\n%s", err, out)
	}
	if fi, err := os.Stat(os.DevNull); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Fatalf("/dev/null is no longer a device: %v %v", fi.Mode(), err)
	}
	for format, want := range map[string]string{"folded": "spin", "pprof": "\x1f\x8b", "html": "<html", "svg": "<svg"} {
		cmd := exec.Command(rewindBin, "report", "-q", "-o", "-", "--format", format, data)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		got, err := cmd.Output()
		if err != nil || !strings.Contains(string(got), want) {
			t.Errorf("report -o - --format %s: %v, stdout %.80q, want %q in it\n%s", format, err, got, want, stderr.String())
		}
	}
	out, err = exec.Command(rewindBin, "report", "-q", "-o", "-", data).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--format") {
		t.Errorf("report -o - without --format: %v, want a failure naming --format\n%s", err, out)
	}
	out, err = exec.Command(rewindBin, "report", "-q", "-o", "x.html", "--format", "svg", data).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--format is for -o -") {
		t.Errorf("report -o x.html --format svg: %v, want a failure\n%s", err, out)
	}
}
