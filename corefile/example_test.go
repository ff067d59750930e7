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
// methods and symbolize the frames. The core is the kernel's dump of
// testdata/crash/crash.c, which died of SIGILL two calls below _start;
// its executable is given here because it is no longer at the path the
// core names.
func ExampleCore_Target() {
	c, err := corefile.Open("testdata/crash/crash.core")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	tg, err := c.Target(nil, "testdata/crash/crash") // "" keeps the path the core names
	if err != nil {
		log.Fatal(err)
	}
	u, _ := unwind.ByName("auto")
	rep := stacks.Unwind(tg, stacks.Options{Unwinder: u}, &symbolize.Symbolizer{Inlines: true})
	for _, th := range rep.Threads {
		fmt.Printf("thread %d (%d frames, end %s)\n", th.TID, len(th.Frames), th.End)
		for _, f := range th.Frames {
			fmt.Printf("  %#x %s %s:%d [%s]\n", f.PC, f.Name(), f.File, f.Line, f.Method)
		}
	}
	// Output:
	// thread 11030 (3 frames, end outermost)
	//   0x401000 crash crash.c:5 [context]
	//   0x40100c middle+0x9 crash.c:6 [dwarf]
	//   0x401017 _start+0x9 crash.c:7 [dwarf]
}
