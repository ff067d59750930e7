package locate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/elfobj"
)

func buildID(t *testing.T, path string) string {
	f, err := elfobj.Open(path)
	if err != nil {
		t.Skipf("%s: %v", path, err)
	}
	defer f.Close()
	if f.BuildIDHex() == "" {
		t.Skipf("%s has no build-id", path)
	}
	return f.BuildIDHex()
}

func copyTo(t *testing.T, from, to string) {
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPerfBuildIDCache finds a missing object in perf's build-id cache
// layout (DIR/.build-id/xx/rest -> ../../PATH/ID, holding elf).
func TestPerfBuildIDCache(t *testing.T) {
	id := buildID(t, "/bin/ls")
	cache := t.TempDir()
	dir := filepath.Join(cache, "gone/bin/ls", id)
	copyTo(t, "/bin/ls", filepath.Join(dir, "elf"))
	link := filepath.Join(cache, ".build-id", id[:2], id[2:])
	os.MkdirAll(filepath.Dir(link), 0o755)
	if err := os.Symlink(filepath.Join("../..", "gone/bin/ls", id), link); err != nil {
		t.Fatal(err)
	}
	r := &Resolver{BuildIDDirs: []string{cache}}
	r.Expect("/gone/bin/ls", id)
	f, err := r.Open("/gone/bin/ls")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.BuildIDHex() != id || r.Chosen("/gone/bin/ls") != filepath.Join(link, "elf") {
		t.Errorf("opened %s (%s)", r.Chosen("/gone/bin/ls"), f.BuildIDHex())
	}
}

// TestMismatchWarnsOnce: a user file with another build-id is refused
// with one warning however often it is asked for, and its error names
// the mapped path and why.
func TestMismatchWarnsOnce(t *testing.T) {
	buildID(t, "/bin/ls")
	dir := t.TempDir()
	copyTo(t, "/bin/ls", filepath.Join(dir, "prog"))
	var warnings []string
	r := &Resolver{Files: []string{filepath.Join(dir, "prog")}, Exe: "/old/prog", Warn: func(s string) { warnings = append(warnings, s) }}
	r.Expect("/old/prog", strings.Repeat("12", 20))
	for i := 0; i < 3; i++ {
		if _, err := r.Open("/old/prog"); err == nil || !strings.Contains(err.Error(), "/old/prog") || !strings.Contains(err.Error(), "differs") {
			t.Errorf("mismatched file accepted or unexplained: %v", err)
		}
	}
	if len(warnings) != 1 {
		t.Errorf("warnings: %q", warnings)
	}
	r.Force = true
	if f, err := r.Open("/old/prog"); err != nil {
		t.Errorf("--force: %v", err)
	} else {
		f.Close()
	}
}

// TestNoFIFO: a FIFO at a looked-up path is never opened.
func TestNoFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "lib.so")
	if err := mkfifo(fifo); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	r := &Resolver{Sysroot: dir}
	if _, err := r.Open(fifo); err == nil {
		t.Error("FIFO opened")
	} else if msg := err.Error(); strings.Count(msg, fifo+": ") != 1 || !strings.Contains(msg, "FIFO") {
		t.Errorf("error %q: want the path once and why", msg)
	}
	if _, err := r.OpenReader("/lib.so"); err == nil {
		t.Error("FIFO opened for reading")
	}
}

// TestForceMappedPath: the file at the mapped path itself, rebuilt since
// the core or recording was made, is refused with an error that says why
// without repeating the path and names both build-ids; --force uses it
// (with a warning), but only when nothing with the recorded build-id is
// found anywhere else.
func TestForceMappedPath(t *testing.T) {
	lsID := buildID(t, "/bin/ls")
	dir := t.TempDir()
	prog := filepath.Join(dir, "prog")
	copyTo(t, "/bin/ls", prog)
	recorded := strings.Repeat("12", 20)

	r := &Resolver{Warn: func(string) {}}
	r.Expect(prog, recorded)
	_, err := r.Open(prog)
	if err == nil {
		t.Fatal("a file with another build-id was used without --force")
	}
	msg := err.Error()
	if strings.Count(msg, prog) != 1 || !strings.Contains(msg, lsID) || !strings.Contains(msg, recorded) || !strings.Contains(msg, "--force") {
		t.Errorf("error %q: want the path once, both build-ids and --force", msg)
	}

	var warnings []string
	r = &Resolver{Force: true, Warn: func(s string) { warnings = append(warnings, s) }}
	r.Expect(prog, recorded)
	f, err := r.Open(prog)
	if err != nil {
		t.Fatalf("--force: %v", err)
	}
	f.Close()
	if r.Chosen(prog) != prog || len(warnings) != 1 || !strings.Contains(warnings[0], "--force") || !strings.Contains(warnings[0], recorded) {
		t.Errorf("--force: chose %q, warnings %q", r.Chosen(prog), warnings)
	}

	// A file with the recorded build-id elsewhere (perf's build-id
	// cache) wins over the forced one.
	buildID(t, "/bin/cat")
	cache := t.TempDir()
	good := filepath.Join(cache, ".build-id", lsID[:2], lsID[2:])
	copyTo(t, "/bin/ls", good)
	copyTo(t, "/bin/cat", prog)
	r = &Resolver{Force: true, BuildIDDirs: []string{cache}, Warn: func(string) {}}
	r.Expect(prog, lsID)
	if f, err := r.Open(prog); err != nil {
		t.Fatal(err)
	} else {
		f.Close()
	}
	if r.Chosen(prog) != good {
		t.Errorf("chose %q, want %q, which has the recorded build-id", r.Chosen(prog), good)
	}
}
