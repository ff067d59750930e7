package flamegraph_test

import (
	"fmt"
	"io"
	"strings"

	"github.com/rewindstack/rewind/flamegraph"
)

// Render a folded-stacks file (as written by perf script |
// stackcollapse-perf.pl, or rewind) as an HTML flame graph.
func Example() {
	folded := "main;work;compute 42\nmain;work;io 8\nswapper;do_idle [k] 5\n"
	samples, err := flamegraph.ParseFolded(strings.NewReader(folded))
	if err != nil {
		fmt.Println(err)
		return
	}
	err = flamegraph.WriteHTML(io.Discard, samples, flamegraph.Options{
		Title:    "Example",
		Unit:     "samples",
		Subtitle: "rewind record -F 99, 0.6 s",
	})
	fmt.Println(len(samples), "stacks rendered, error:", err)
	// Output: 3 stacks rendered, error: <nil>
}
