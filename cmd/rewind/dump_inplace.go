package main

import (
	"fmt"
	"os"

	"github.com/rewindstack/rewind/internal/taskiter"
	"github.com/rewindstack/rewind/internal/textesc"
	"github.com/rewindstack/rewind/live"
)

// inPlaceOptions returns lopt for a dump that, when inPlace, reads the
// threads blocked in the kernel without stopping them
// (live.Options.BlockedThreads, through a BPF task iterator), and what
// unloads the iterator. Without BPF the threads are stopped as with
// --stop, and one line says why.
func inPlaceOptions(lopt live.Options, inPlace bool) (_ live.Options, unload func()) {
	if !inPlace {
		return lopt, func() {}
	}
	it, err := taskiter.Open()
	if err != nil {
		why := "root, or CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE"
		if os.Geteuid() == 0 {
			why = err.Error() // root: the kernel's own reason
		}
		fmt.Fprintf(os.Stderr, "rewind: every thread is stopped to be read: reading blocked threads in place needs BPF (%s); --stop asks for the stop and hides this line\n", textesc.String(why))
		return lopt, func() {}
	}
	lopt.BlockedThreads = it.Blocked
	return lopt, func() { it.Close() }
}
