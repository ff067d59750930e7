package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"golang.org/x/sys/unix"
)

// sframeGenInput copies /bin/true, mode 0755, for sframe gen.
func sframeGenInput(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Skip("no /bin/true")
	}
	in := filepath.Join(t.TempDir(), "true")
	if err := os.WriteFile(in, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return in
}

// runNoHang runs rewind and fails the test if it does not end (it opened
// a FIFO), killing it.
func runNoHang(t *testing.T, args ...string) (stderr string, code int) {
	t.Helper()
	cmd := exec.Command(rewindBin, args...)
	var e strings.Builder
	cmd.Stderr = &e
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Errorf("rewind %q blocked", args)
		return e.String(), -1
	}
	return e.String(), cmd.ProcessState.ExitCode()
}

// TestSFrameGenRefusesSpecialOutputs: sframe gen -o naming a symbolic
// link, a FIFO or a device is refused with an error naming it; the link's
// target is not overwritten or made executable, nothing blocks on the
// FIFO, and the device (a copy of /dev/null) keeps its mode.
func TestSFrameGenRefusesSpecialOutputs(t *testing.T) {
	in := sframeGenInput(t)
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	outs := []string{link, fifo}
	dev := filepath.Join(dir, "null")
	if err := unix.Mknod(dev, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err == nil {
		unix.Chmod(dev, 0o666)
		outs = append(outs, dev)
	} else {
		t.Logf("not testing a device output: mknod needs CAP_MKNOD: %v", err)
	}
	for _, o := range outs {
		stderr, code := runNoHang(t, "sframe", "gen", "-q", in, "-o", o)
		if code == 0 || !strings.Contains(stderr, o) || !strings.Contains(stderr, "not a regular file") {
			t.Errorf("sframe gen -o %s: exit %d, stderr:\n%s", o, code, stderr)
		}
	}
	if b, _ := os.ReadFile(target); string(b) != "precious" {
		t.Errorf("link target overwritten: %.20q", b)
	}
	for p, want := range map[string]uint32{target: unix.S_IFREG | 0o600, link: unix.S_IFLNK | 0o777, fifo: unix.S_IFIFO | 0o644, dev: unix.S_IFCHR | 0o666} {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err == nil && st.Mode&^0o7000 != want {
			t.Errorf("%s: mode %#o, want %#o", p, st.Mode, want)
		}
	}
}

// TestSFrameGenKeepsExistingMode: sframe gen over an existing output
// replaces its contents but keeps its mode (it chmodded the path).
func TestSFrameGenKeepsExistingMode(t *testing.T) {
	in := sframeGenInput(t)
	out := filepath.Join(t.TempDir(), "out")
	if err := os.WriteFile(out, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := run(t, "sframe", "gen", "-q", in, "-o", out); code != 0 {
		t.Fatalf("sframe gen: exit %d: %s", code, stderr)
	}
	st, err := os.Stat(out)
	if err != nil || st.Mode().Perm() != 0o600 || st.Size() < 1000 {
		t.Errorf("output: %v, %v; want the new contents, mode 0600", st, err)
	}
}

// TestSFrameGenFullDisk: sframe gen onto a file system too small for its
// output fails with ENOSPC and leaves the old output whole, with no
// temporary file beside it.
func TestSFrameGenFullDisk(t *testing.T) {
	in := sframeGenInput(t)
	fi, err := os.Stat(in)
	if err != nil {
		t.Fatal(err)
	}
	// Room for the old file, not for a copy of the input.
	dir := fixture.Tmpfs(t, max(16<<10, fi.Size()/2&^4095))
	out := filepath.Join(dir, "out")
	if err := os.WriteFile(out, []byte("the good old output"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := run(t, "sframe", "gen", "-q", in, "-o", out)
	if code == 0 || !strings.Contains(stderr, "no space left") {
		t.Errorf("sframe gen on a full disk: exit %d, stderr:\n%s", code, stderr)
	}
	if b, _ := os.ReadFile(out); string(b) != "the good old output" {
		t.Errorf("old output damaged: %d bytes", len(b))
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Errorf("%d files left in %s", len(es), dir)
	}
}

// TestReportFullDiskSavesFolded: report without -o on a file system with
// room for the folded stacks but not the flame graph fails, saving the
// stacks under a default .folded name it claims, and leaves no partial
// flame graph or temporary file.
func TestReportFullDiskSavesFolded(t *testing.T) {
	data, err := filepath.Abs(spinData)
	if err != nil {
		t.Fatal(err)
	}
	dir := fixture.Tmpfs(t, 64<<10)
	// Fill it, then free 8 KiB: the spin profile's flame graph is 13
	// KiB, its folded stacks a few hundred bytes.
	fill, err := os.Create(filepath.Join(dir, ".fill"))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for {
		k, err := fill.Write(make([]byte, 4096))
		n += int64(k)
		if err != nil {
			break
		}
	}
	if err := fill.Truncate(n - 8192); err != nil {
		t.Fatal(err)
	}
	fill.Close()
	cmd := exec.Command(rewindBin, "report", "-q", data)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "no space left") || !strings.Contains(string(out), "the stacks were saved as rewind-") {
		t.Fatalf("report on a nearly full disk: %v\n%s", err, out)
	}
	es, _ := os.ReadDir(dir)
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	if len(names) != 2 || !strings.HasSuffix(names[1], ".folded") {
		t.Fatalf("files %q, want the filler and the folded stacks", names)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, names[1])); !strings.Contains(string(b), "spin") {
		t.Errorf("%s: %q", names[1], b)
	}
}

// TestReportFullDiskSavesInTemp: report -o on a file system with no room
// at all fails and saves the profile in the temporary directory, saying
// where, rather than losing it (issue 38 item 6).
func TestReportFullDiskSavesInTemp(t *testing.T) {
	data, err := filepath.Abs(spinData)
	if err != nil {
		t.Fatal(err)
	}
	dir := fixture.Tmpfs(t, 64<<10)
	fill, err := os.Create(filepath.Join(dir, ".fill"))
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := fill.Write(make([]byte, 4096)); err != nil {
			break
		}
	}
	fill.Close()
	tmp := t.TempDir()
	cmd := exec.Command(rewindBin, "report", "-q", "-o", filepath.Join(dir, "out.html"), data)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	out, err := cmd.CombinedOutput()
	want := "the profile was saved as " + tmp + "/rewind-saved-"
	if err == nil || !strings.Contains(string(out), "no space left") || !strings.Contains(string(out), want) {
		t.Fatalf("report on a full disk: %v, want a failure saying %q\n%s", err, want, out)
	}
	es, _ := os.ReadDir(tmp)
	if len(es) != 1 || !strings.HasSuffix(es[0].Name(), ".html") {
		t.Fatalf("files in the temporary directory: %v, want the saved flame graph", es)
	}
	if b, _ := os.ReadFile(filepath.Join(tmp, es[0].Name())); !strings.Contains(string(b), "spin") {
		t.Errorf("%s does not hold the profile", es[0].Name())
	}
}
