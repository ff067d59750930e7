package profiles

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteFileByExtension: one registry picks the format by extension
// and refuses unknown ones before writing anything.
func TestWriteFileByExtension(t *testing.T) {
	dir := t.TempDir()
	p := &Profile{Stacks: []Stack{{Comm: "prog", Value: 1, Locations: []*Location{{Addr: 1, Lines: nil}}}}}
	for ext, want := range map[string]string{".folded": "prog", ".html": "<html", ".svg": "<svg"} {
		path := filepath.Join(dir, "p"+ext)
		if err := p.WriteFile(path, WriteOptions{PeriodNS: 1e6, Title: "t"}); err != nil {
			t.Fatalf("%s: %v", ext, err)
		}
		b, _ := os.ReadFile(path)
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %q", ext, want)
		}
	}
	if err := p.WriteFile(filepath.Join(dir, "p.txt"), WriteOptions{}); err == nil || !strings.Contains(err.Error(), "unknown format") {
		t.Errorf("p.txt: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "p.txt")); err == nil {
		t.Errorf("p.txt written")
	}
}
