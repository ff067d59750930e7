package main

import (
	"fmt"
	"os"

	"github.com/rewindstack/rewind/profiles"
)

// writeFlameGraph writes an HTML or SVG flame graph (once package
// flamegraph is in).
func writeFlameGraph(f *os.File, prof *profiles.Profile, svg bool, title string) error {
	return fmt.Errorf("HTML and SVG flame graphs are not available yet; use .pb.gz or .folded")
}
