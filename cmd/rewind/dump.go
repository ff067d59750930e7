package main

import (
	"fmt"
	"os"

	"github.com/rewindstack/rewind/corefile"
	"github.com/rewindstack/rewind/output"
	"github.com/rewindstack/rewind/stacks"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/unwind"
)

func runDump(args []string) error {
	fs := newFlags("dump", `rewind dump --core FILE [--exe PATH]: print the stack of every thread in an ELF core file.

Frames show the PC (the current PC for frame #0, the return address for
callers, as eu-stack and gdb print them), function+offset, module, and the
method that found the frame; each thread ends with the reason its walk
stopped.`)
	core := fs.String("core", "", "ELF core `FILE` to read (required)")
	exe := fs.String("exe", "", "executable `PATH` to use instead of the one the core names")
	method := methodFlag(fs)
	maxDepth := fs.Int("max-depth", 1024, "stop each walk after `N` frames")
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	threads := fs.String("threads", "", "only these thread IDs (`TID,...`)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *core == "" || fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("need --core FILE (live processes arrive with 'rewind dump PID')")
	}
	u, err := unwinderFor(*method, *maxDepth)
	if err != nil {
		return err
	}
	tids, err := parseTIDs(*threads)
	if err != nil {
		return err
	}
	c, err := corefile.Open(*core)
	if err != nil {
		return err
	}
	defer c.Close()
	objs := &unwind.Objects{}
	target, err := stacks.FromCore(c, *exe, objs)
	if err != nil {
		return err
	}
	warnUnreadable(target.Space)
	rep := stacks.Unwind(target, stacks.Options{Unwinder: u, Threads: tids}, &symbolize.Symbolizer{})
	if *asJSON {
		return output.WriteJSON(os.Stdout, rep)
	}
	return output.WriteText(os.Stdout, rep)
}

// warnUnreadable tells the user about mapped objects that could not be
// opened: their frames print as addresses only.
func warnUnreadable(space *unwind.AddressSpace) {
	seen := map[string]bool{}
	for _, m := range space.Mappings() {
		if m.Module != nil && m.Module.File == nil && !seen[m.Path] {
			seen[m.Path] = true
			fmt.Fprintf(os.Stderr, "rewind: warning: %v (frames in it print as addresses)\n", m.Module.Err)
		}
	}
}
