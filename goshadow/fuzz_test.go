package goshadow

import (
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fuzzcorpus"
)

var writeSeeds = flag.Bool("writeseeds", false, "rewrite the committed fuzz seed corpus in testdata/fuzz")

// TestWriteSeeds regenerates testdata/fuzz/FuzzEditApply with -writeseeds.
func TestWriteSeeds(t *testing.T) {
	if !*writeSeeds {
		t.Skip("pass -writeseeds to rewrite the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzEditApply")
	seeds := [][]any{
		{"a\nANCHOR\nb\n", "ANCHOR\n", "X\n", 0},
		{"a\nANCHOR\nb\n", "ANCHOR\n", "X\n", 1},
		{"a\nANCHOR\nb\n", "ANCHOR\n", "X\n", 2},
		{"ANCHORANCHOR", "ANCHOR", "", 0},
		{"", "", "x", 0},
		{"\tframe.varp = frame.fp\n", "\n\tframe.varp = frame.fp\n", "y", 1},
	}
	for i, s := range seeds {
		if err := fuzzcorpus.Write(dir, "seed"+string(rune('0'+i)), s...); err != nil {
			t.Fatal(err)
		}
	}
}

// FuzzEditApply checks that an edit never panics, fails exactly when the
// anchor is not unique, and otherwise inserts or replaces exactly once.
func FuzzEditApply(f *testing.F) {
	f.Add("a\nANCHOR\nb\n", "ANCHOR\n", "X\n", 0)
	f.Fuzz(func(t *testing.T, src, anchor, text string, mode int) {
		e := Edit{File: "f.go", Anchor: anchor, Text: text, Before: (mode%3+3)%3 == 1, Replace: (mode%3+3)%3 == 2}
		out, err := e.Apply(src)
		unique := anchor != "" && strings.Count(src, anchor) == 1
		if unique != (err == nil) {
			t.Fatalf("Apply(%q, anchor %q): err %v, anchor unique %v", src, anchor, err, unique)
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.go: ") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		want := len(src) + len(text)
		if e.Replace {
			want -= len(anchor)
		}
		if len(out) != want || !strings.Contains(out, text) {
			t.Fatalf("Apply(%q, %q, %q, mode %d) = %q", src, anchor, text, mode, out)
		}
		if !e.Replace && !strings.Contains(out, anchor) {
			t.Fatalf("anchor lost: %q", out)
		}
	})
}
