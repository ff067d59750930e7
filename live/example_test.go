package live_test

import (
	"fmt"
	"log"
	"os"

	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/output"
	"github.com/rewindstack/rewind/stacks"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/unwind"
)

// Dumping a live process: Capture stops its threads only while it copies
// their registers and stacks, then the copies are unwound and symbolized
// while the process runs on.
func ExampleCapture() {
	pid := 12345
	snap, err := live.Capture(pid, live.Options{})
	if err != nil {
		log.Fatal(err) // errors.Is(err, os.ErrPermission), live.ErrZombie, ...
	}
	fmt.Printf("process %d paused for %v\n", pid, snap.Pause)
	tg := snap.Target(nil, func(w string) { fmt.Fprintln(os.Stderr, "warning:", w) })
	u, _ := unwind.ByName("auto")
	rep := stacks.Unwind(tg, stacks.Options{Unwinder: u}, &symbolize.Symbolizer{Inlines: true})
	output.WriteText(os.Stdout, rep)
}
