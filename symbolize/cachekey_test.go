package symbolize

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/rewindstack/rewind/elfobj"
)

// TestIndexKeyFollowsContent: a DWARF source rewritten in place with the
// same size, build-id and modification time gets a new index key, and
// an unchanged one keeps its key.
func TestIndexKeyFollowsContent(t *testing.T) {
	p := filepath.Join(t.TempDir(), "obj")
	if err := os.WriteFile(p, []byte("first contents"), 0o600); err != nil {
		t.Fatal(err)
	}
	mtime := time.Unix(1700000000, 0)
	os.Chtimes(p, mtime, mtime)
	rel1, key1 := indexKey("abcdef", p)
	if rel2, key2 := indexKey("abcdef", p); rel1 != rel2 || key1 != key2 {
		t.Fatal("the key of an unchanged file changed")
	}
	time.Sleep(10 * time.Millisecond) // a later change time
	if err := os.WriteFile(p, []byte("other contents"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(p, mtime, mtime)
	if rel2, key2 := indexKey("abcdef", p); rel1 == rel2 || key1 == key2 {
		t.Fatal("a file rewritten with the same size and mtime kept its index key")
	}
}

// TestSameBuildIDNotShared: a Go program linked with libc's build-id is
// paired with libc's debug file by build-id; symbolizing it first must
// not change how libc is symbolized through the same cache (its Go table
// must not become libc's).
func TestSameBuildIDNotShared(t *testing.T) {
	const libc = "/lib/x86_64-linux-gnu/libc.so.6"
	lf, err := elfobj.Open(libc)
	if err != nil {
		t.Skipf("no libc: %v", err)
	}
	bid := lf.BuildIDHex()
	lf.Close()
	gobin, err := exec.LookPath("go")
	if err != nil || bid == "" {
		t.Skip("no go command or libc build-id")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	os.WriteFile(src, []byte("package main\n\nfunc main() { println(\"hi\") }\n"), 0o600)
	exe := filepath.Join(dir, "impostor")
	cmd := exec.Command(gobin, "build", "-o", exe, "-ldflags=-B 0x"+bid+" -T 0x28000", src)
	cmd.Env = append(os.Environ(), "GO111MODULE=off", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("go build: %v\n%s", err, out)
	}
	goSpace, goBias := loadSpace(t, exe)
	libcSpace, libcBias := loadSpace(t, libc)
	libcPCs := textPCs(t, libc, libcBias, 4099)
	want := resolveAll(libcSpace, libcPCs, NewCache(), nil)
	shared := NewCache()
	resolveAll(goSpace, textPCs(t, exe, goBias, 997), shared, nil)
	got := resolveAll(libcSpace, libcPCs, shared, nil)
	for i := range want {
		if fmt.Sprint(got[i]) != fmt.Sprint(want[i]) {
			t.Fatalf("libc %#x: %v after the impostor, %v alone", libcPCs[i], got[i], want[i])
		}
	}
}
