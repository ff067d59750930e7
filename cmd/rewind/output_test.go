package main

import (
	"os"
	"strings"
	"testing"
	"time"
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
	out, err := outputPath("")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "rewind-") || !strings.HasSuffix(out, "-3.html") {
		t.Errorf("default output %q, want rewind-TIME-3.html", out)
	}
	if _, err := os.Lstat(out); err == nil {
		t.Errorf("default output %q exists", out)
	}
	if got, err := outputPath("x.folded"); err != nil || got != "x.folded" {
		t.Errorf("outputPath(x.folded) = %q, %v", got, err)
	}
}
