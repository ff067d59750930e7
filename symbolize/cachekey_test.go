package symbolize

import (
	"os"
	"path/filepath"
	"testing"
	"time"
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
