package target

import (
	"bytes"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/internal/cachefile"
	"github.com/rewindstack/rewind/unwindtable"
)

const libc = "/lib/x86_64-linux-gnu/libc.so.6"

func cc(t *testing.T, dir, name, src string, flags ...string) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not installed")
	}
	c := filepath.Join(dir, name+".c")
	if err := os.WriteFile(c, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name)
	if b, err := exec.Command(gcc, append([]string{"-O2", "-o", out, c}, flags...)...).CombinedOutput(); err != nil {
		t.Skipf("cannot compile: %v\n%s", err, b)
	}
	return out
}

// encoded returns the table the persistent cache in dir gives for the
// object at path, encoded, and the table built afresh from its CFI.
func encoded(t *testing.T, dir, path string) (cached, fresh []byte) {
	t.Helper()
	objs := &Objects{}
	objs.Tables.Dir = dir
	m := objs.Module(path)
	if m.File == nil {
		t.Fatalf("%s: %v", path, m.Err)
	}
	tab, err := m.Table()
	if err != nil {
		t.Fatal(err)
	}
	want, err := unwindtable.BuildFile(m.File)
	if err != nil {
		t.Fatal(err)
	}
	cached, _ = tab.MarshalBinary()
	fresh, _ = want.MarshalBinary()
	return cached, fresh
}

// TestSameBuildIDOwnTables: two different programs linked with the same
// --build-id each get the table of their own CFI through a shared
// persistent cache, in either order, and a static program claiming
// libc's build-id does not change libc's table.
func TestSameBuildIDOwnTables(t *testing.T) {
	dir := t.TempDir()
	cache := filepath.Join(dir, "cache")
	id := "-Wl,--build-id=0x1234567890abcdef1234567890abcdef12345678"
	a := cc(t, dir, "a", "int f(int x){return x*3;}\nint main(int c, char **v){return f(c);}\n", id)
	b := cc(t, dir, "b", "#include <stdio.h>\nstatic int g(int x){char b[64]; snprintf(b, sizeof b, \"%d\", x); return b[0];}\nint h(int x){return g(x)+g(x+1);}\nint main(int c, char **v){printf(\"%d\", h(c)); return 0;}\n", id)
	for round := 0; round < 2; round++ {
		for _, p := range []string{a, b} {
			got, want := encoded(t, cache, p)
			if !bytes.Equal(got, want) {
				t.Fatalf("round %d: %s got another object's table from the cache", round, filepath.Base(p))
			}
		}
	}
	lf, err := elfobj.Open(libc)
	if err != nil {
		t.Skipf("no libc: %v", err)
	}
	bid := lf.BuildIDHex()
	lf.Close()
	if bid == "" {
		t.Skip("libc has no build-id")
	}
	p := cc(t, dir, "p", "int main(void){return 0;}\n", "-static", "-Wl,--build-id=0x"+bid)
	if f, err := elfobj.Open(p); err != nil || f.BuildIDHex() != bid {
		t.Fatalf("the static program does not carry libc's build-id (%v)", err)
	}
	for _, path := range []string{p, libc, p, libc} {
		got, want := encoded(t, cache, path)
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: the cache gave another object's table", path)
		}
	}
}

// TestWarmCacheCorruption damages the persisted libc table at random,
// many times: every damage is detected (the table is the one its CFI
// gives), noted, and the file rewritten whole.
func TestWarmCacheCorruption(t *testing.T) {
	if _, err := os.Stat(libc); err != nil {
		t.Skip("no libc")
	}
	cache := t.TempDir()
	encoded(t, cache, libc)
	files, _ := filepath.Glob(filepath.Join(cache, "tables", "*", "*"))
	if len(files) != 1 {
		t.Fatalf("cache files %v, want one", files)
	}
	good, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(14))
	cachefile.TakeNotes()
	for i := 0; i < 200; i++ {
		b := append([]byte(nil), good...)
		switch i % 4 {
		case 0, 1:
			for n := 1 + rng.Intn(3); n > 0; n-- {
				b[rng.Intn(len(b))] ^= byte(1 + rng.Intn(255))
			}
		case 2:
			b = b[:rng.Intn(len(b))]
		case 3:
			off := rng.Intn(len(b))
			b = append(b[:off:off], append([]byte{byte(rng.Intn(256))}, b[off:]...)...)
		}
		if err := os.WriteFile(files[0], b, 0o600); err != nil {
			t.Fatal(err)
		}
		got, want := encoded(t, cache, libc)
		if !bytes.Equal(got, want) {
			t.Fatalf("corruption %d gave a different table", i)
		}
		if now, _ := os.ReadFile(files[0]); !bytes.Equal(now, good) {
			t.Fatalf("corruption %d: the file was not rewritten", i)
		}
		_, other := cachefile.TakeNotes()
		if len(other) != 1 || !strings.Contains(other[0], "rebuilt") {
			t.Fatalf("corruption %d: notes %q, want one rebuild", i, other)
		}
	}
}
