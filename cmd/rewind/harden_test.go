package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/fixture"
	"golang.org/x/sys/unix"
)

// TestProfileModeAndTitle: a profile is created under the umask (not
// 0644 whatever it is) and its title names the command, not its
// arguments, unless --title says otherwise.
func TestProfileModeAndTitle(t *testing.T) {
	old := unix.Umask(0o027)
	defer unix.Umask(old)
	dir := t.TempDir()
	out := filepath.Join(dir, "p.html")
	_, stderr, code := run(t, "record", "-q", "-o", out, "--", "sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done", "--password=hunter2")
	if code != 0 {
		if strings.Contains(stderr, "perf_event_open") || strings.Contains(stderr, "permission") {
			t.Skipf("cannot record here: %s", stderr)
		}
		t.Fatalf("record: rc %d\n%s", code, stderr)
	}
	fi, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("profile mode %#o under umask 027, want 0640", fi.Mode().Perm())
	}
	html, _ := os.ReadFile(out)
	if strings.Contains(string(html), "hunter2") || strings.Contains(string(html), "while [") {
		t.Errorf("the profile carries the command's arguments")
	}
	if !strings.Contains(string(html), "rewind record sh") {
		t.Errorf("the title does not name the command")
	}
	_, stderr, code = run(t, "record", "-q", "--title", "my <run>", "-o", out, "--", "true")
	if code != 0 {
		t.Fatalf("record --title: rc %d\n%s", code, stderr)
	}
	html, _ = os.ReadFile(out)
	if !strings.Contains(string(html), "my &lt;run&gt;") {
		t.Errorf("--title is not the title")
	}
}

// TestDumpCacheTrust: an untrusted cache (another's, writable by others,
// or a symlinked subdirectory) is refused with a warning and the dump is
// still right; corrupt entries are rebuilt, and --stats says so.
func TestDumpCacheTrust(t *testing.T) {
	exe := fixture.Build(t, "recurse", fixture.Variants[3])
	p := fixture.Start(t, exe, "40")
	core := fixture.Gcore(t, p)
	cache := filepath.Join(t.TempDir(), "cache")
	t.Setenv("REWIND_CACHE_DIR", cache)
	fresh, errOut, code := run(t, "dump", "--no-cache", "--core", core)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	check := func(what, wantErr string) string {
		t.Helper()
		out, errOut, code := run(t, "dump", "--stats", "--core", core)
		if code != 0 || out != fresh {
			t.Fatalf("%s: exit %d, output differs:\n%s\n%s", what, code, out, errOut)
		}
		if !strings.Contains(errOut, wantErr) {
			t.Fatalf("%s: stderr lacks %q:\n%s", what, wantErr, errOut)
		}
		return errOut
	}
	check("cold", "rewind: ")
	// Corrupt every cached file: each is detected and rebuilt.
	files, _ := filepath.Glob(filepath.Join(cache, "*", "*", "*"))
	if len(files) == 0 {
		t.Fatal("nothing cached")
	}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		b[len(b)/2] ^= 0x40
		os.WriteFile(f, b, 0o600)
	}
	check("corrupt", "checksum mismatch: table rebuilt")
	// A symlinked subdirectory is not followed.
	victim := t.TempDir()
	os.RemoveAll(filepath.Join(cache, "tables"))
	os.Symlink(victim, filepath.Join(cache, "tables"))
	check("symlinked subdirectory", "is a symbolic link: refusing")
	if ents, _ := os.ReadDir(victim); len(ents) != 0 {
		t.Fatalf("wrote through the symlink: %v", ents)
	}
	os.Remove(filepath.Join(cache, "tables"))
	os.Chmod(cache, 0o777)
	errOut = check("world-writable", "writable by group or others")
	if !strings.Contains(errOut, "running without the cache") {
		t.Fatalf("no refusal of the root:\n%s", errOut)
	}
	os.Chmod(cache, 0o700)
	if os.Geteuid() == 0 {
		os.Chown(cache, 65534, 65534)
		check("another user's", "owned by uid 65534")
	}
}

// TestFIFOInputs: no command blocks on a FIFO named as its input; each
// refuses it at once, naming it.
func TestFIFOInputs(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "f")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"table", fifo},
		{"sframe", "dump", fifo},
		{"sframe", "gen", fifo, "-o", filepath.Join(dir, "out")},
		{"sframe", "gen", "--separate", fifo, "-o", filepath.Join(dir, "out")},
		{"dump", "--core", fifo},
		{"report", "-o", filepath.Join(dir, "out.folded"), fifo},
	} {
		done := make(chan struct{})
		var stderr string
		var code int
		go func() {
			defer close(done)
			_, stderr, code = run(t, args...)
		}()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("rewind %s blocked on a FIFO", strings.Join(args, " "))
		}
		if code == 0 || !strings.Contains(stderr, fifo) || !strings.Contains(stderr, "not a regular file (a FIFO)") {
			t.Errorf("rewind %s: rc %d, stderr %q", strings.Join(args, " "), code, stderr)
		}
	}
}
