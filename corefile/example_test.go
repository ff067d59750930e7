package corefile_test

import (
	"fmt"
	"log"

	"github.com/rewindstack/rewind/corefile"
	"github.com/rewindstack/rewind/stacks"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/unwind"
)

// Unwinding every thread of a core file: open it, make a target of it
// (its threads, memory and mappings), walk each thread with the default
// methods and symbolize the frames.
func ExampleCore_Target() {
	c, err := corefile.Open("core.12345")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	tg, err := c.Target(nil, "") // "" keeps the executable path the core names
	if err != nil {
		log.Fatal(err)
	}
	u, _ := unwind.ByName("auto")
	rep := stacks.Unwind(tg, stacks.Options{Unwinder: u}, &symbolize.Symbolizer{Inlines: true})
	for _, th := range rep.Threads {
		fmt.Printf("thread %d (%d frames, end %s)\n", th.TID, len(th.Frames), th.End)
		for _, f := range th.Frames {
			fmt.Printf("  %#x %s [%s]\n", f.PC, f.Name(), f.Method)
		}
	}
}
