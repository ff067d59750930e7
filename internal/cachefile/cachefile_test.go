package cachefile

import (
	"errors"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestWriteRead(t *testing.T) {
	root := filepath.Join(t.TempDir(), "cache")
	for _, data := range []string{"first", "second, longer"} {
		if err := Write(root, "a/b/file", "k1", []byte(data)); err != nil {
			t.Fatal(err)
		}
		got, err := Read(root, "a/b/file", "k1", 1<<20)
		if err != nil || string(got) != data {
			t.Fatalf("read %q, %v; want %q", got, err, data)
		}
	}
	for _, d := range []string{root, filepath.Join(root, "a"), filepath.Join(root, "a", "b")} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s: mode %v, %v", d, fi.Mode(), err)
		}
	}
	left, _ := filepath.Glob(filepath.Join(root, "a", "b", ".tmp-*"))
	if len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	if _, err := Read(root, "a/b/missing", "k1", 1<<20); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	// Another key's file is not this key's.
	if _, err := Read(root, "a/b/file", "k2", 1<<20); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("read with another key: %v, want ErrCorrupt", err)
	}
	if _, err := Read(root, "a/b/file", "k1", 3); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("read over the size limit: %v, want ErrCorrupt", err)
	}
	// A path whose directory cannot be made fails cleanly.
	if err := Write(root, "a/b/file/under", "k", []byte("x")); err == nil {
		t.Fatal("writing below a regular file succeeded")
	}
	if err := Write(root, "../escape", "k", []byte("x")); err == nil {
		t.Fatal("writing outside the root succeeded")
	}
}

// Every corruption of a file — a flipped byte anywhere, truncation,
// extension — is detected.
func TestCorruptionDetected(t *testing.T) {
	root := t.TempDir()
	data := []byte(strings.Repeat("cache contents ", 40))
	if err := Write(root, "f", "key", data); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "f")
	good, _ := os.ReadFile(path)
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 300; i++ {
		b := append([]byte(nil), good...)
		switch i % 3 {
		case 0:
			b[rng.Intn(len(b))] ^= byte(1 + rng.Intn(255))
		case 1:
			b = b[:rng.Intn(len(b))]
		case 2:
			b = append(b, byte(rng.Intn(256)))
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := Read(root, "f", "key", 1<<20); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("corruption %d not detected: %q, %v", i, got, err)
		}
	}
}

func TestSymlinksNotFollowed(t *testing.T) {
	root := t.TempDir()
	victim := t.TempDir()
	if err := os.Symlink(victim, filepath.Join(root, "tables")); err != nil {
		t.Fatal(err)
	}
	err := Write(root, "tables/93/x", "k", []byte("planted"))
	var ue *UntrustedError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("write through a symlinked directory: %v, want a refusal", err)
	}
	if ents, _ := os.ReadDir(victim); len(ents) != 0 {
		t.Fatalf("wrote into the link's target: %v", ents)
	}
	if _, err := Read(root, "tables/93/x", "k", 1<<20); !errors.As(err, &ue) {
		t.Fatalf("read through a symlinked directory: %v, want a refusal", err)
	}
	// A symlinked file is neither read nor written through.
	outside := filepath.Join(victim, "target")
	os.WriteFile(outside, []byte("outside"), 0o600)
	os.Mkdir(filepath.Join(root, "d"), 0o700)
	if err := os.Symlink(outside, filepath.Join(root, "d", "f")); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(root, "d/f", "k", 1<<20); !errors.As(err, &ue) {
		t.Fatalf("read of a symlinked file: %v, want a refusal", err)
	}
	if err := Write(root, "d/f", "k", []byte("new")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "outside" {
		t.Fatalf("the link's target was overwritten: %q", b)
	}
}

func TestFIFONotOpenedBlocking(t *testing.T) {
	root := t.TempDir()
	if err := unix.Mkfifo(filepath.Join(root, "f"), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := Read(root, "f", "k", 1<<20); done <- err }()
	select {
	case err := <-done:
		var ue *UntrustedError
		if !errors.As(err, &ue) {
			t.Fatalf("read of a FIFO: %v, want a refusal", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("reading a FIFO in the cache blocked")
	}
}

func TestUntrustedDirectories(t *testing.T) {
	root := t.TempDir()
	sub := filepath.Join(root, "tables")
	os.Mkdir(sub, 0o700)
	os.Chmod(sub, 0o777)
	var ue *UntrustedError
	if err := Write(root, "tables/x", "k", []byte("x")); !errors.As(err, &ue) || !strings.Contains(err.Error(), "writable") {
		t.Fatalf("write into a world-writable directory: %v", err)
	}
	os.Chmod(sub, 0o700)
	os.Chmod(root, 0o775)
	if err := CheckRoot(root); !errors.As(err, &ue) {
		t.Fatalf("group-writable root: %v", err)
	}
	os.Chmod(root, 0o700)
	if err := CheckRoot(root); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		t.Skip("chown to another user needs root")
	}
	if err := os.Chown(sub, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(root, "tables/x", "k", 1<<20); !errors.As(err, &ue) || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Fatalf("read from another user's directory: %v", err)
	}
	os.Chown(root, 65534, 65534)
	if err := CheckRoot(root); !errors.As(err, &ue) {
		t.Fatalf("another user's root: %v", err)
	}
}

func TestNotes(t *testing.T) {
	TakeNotes()
	Note(&fs.PathError{Op: "open", Path: "x", Err: fs.ErrNotExist}, "built")
	Note(&UntrustedError{Path: "/c", Reason: "r"}, "")
	Note(errors.New("cache /c/f: checksum mismatch"), "rebuilt")
	Note(errors.New("cache /c/f: checksum mismatch"), "rebuilt")
	u, o := TakeNotes()
	if len(u) != 1 || len(o) != 1 || !strings.HasSuffix(o[0], ": rebuilt") {
		t.Fatalf("notes %q, %q", u, o)
	}
}

// FuzzRead gives Read arbitrary file contents: it returns an error, or
// contents whose trailer is exactly what Write would have put after them
// for the key (so a damaged or foreign file is never taken).
func FuzzRead(f *testing.F) {
	root := f.TempDir()
	good := append([]byte("contents"), trailer("key", []byte("contents"))...)
	f.Add(good, "key")
	f.Add(good, "other key")
	f.Add(good[:len(good)-1], "key")
	f.Add([]byte(trailerMagic), "")
	f.Add([]byte{}, "key")
	f.Fuzz(func(t *testing.T, data []byte, key string) {
		path := filepath.Join(root, "f")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		body, err := Read(root, "f", key, 1<<20)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		want := append(append([]byte(nil), body...), trailer(key, body)...)
		if string(want) != string(data) {
			t.Fatalf("took %q for key %q", data, key)
		}
	})
}
