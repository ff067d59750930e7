package main

import (
	"fmt"
	"github.com/rewindstack/rewind/target"
	"os"
	"path/filepath"

	"github.com/rewindstack/rewind/corefile"
	"github.com/rewindstack/rewind/internal/demo"
	"github.com/rewindstack/rewind/output"
	"github.com/rewindstack/rewind/stacks"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/unwind"
)

func runDemo(args []string) error {
	fs := newFlags("demo", `rewind demo: compile a small bundled C program (gcc -O2, frame pointers on in the
program, the system libc as shipped), run it until its threads are blocked in
libc, capture it, and print each thread's stack as the frame-pointer walk
sees it next to the DWARF CFI walk.

The frame-pointer column shows the "[unknown]" problem: libc is built without
frame pointers, so the chain breaks or skips callers where a stack passes
through it. The DWARF column is the fix.`)
	keep := fs.Bool("keep", false, "keep the build directory and core file, and print where they are")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "rewind-demo-")
	if err != nil {
		return err
	}
	if *keep {
		defer fmt.Printf("files kept in %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	fmt.Fprintln(os.Stderr, "compiling the demo program...")
	exe, err := demo.Build(dir)
	if err != nil {
		return err
	}
	cmd, err := demo.Start(exe)
	if err != nil {
		return err
	}
	pid := cmd.Process.Pid
	fmt.Fprintf(os.Stderr, "capturing process %d...\n", pid)
	core, err := demo.Gcore(pid, filepath.Join(dir, "core"))
	cmd.Process.Kill()
	cmd.Wait()
	if err != nil {
		return err
	}
	c, err := corefile.Open(core)
	if err != nil {
		return err
	}
	defer c.Close()
	objs := &target.Objects{}
	tg, err := c.Target(objs, "")
	if err != nil {
		return err
	}
	sym := &symbolize.Symbolizer{}
	fp := stacks.Unwind(tg, stacks.Options{Unwinder: unwind.NewFP()}, sym)
	dw := stacks.Unwind(tg, stacks.Options{Unwinder: unwind.NewDWARF()}, sym)
	fmt.Printf("Process %d (%s), %d threads\n\n", pid, exe, len(fp.Threads))
	if err := output.WriteSideBySide(os.Stdout, fp, dw, "frame pointers", "DWARF CFI"); err != nil {
		return err
	}
	nfp, ndw := countFrames(fp), countFrames(dw)
	fmt.Printf("frames found: frame pointers %d, DWARF %d", nfp, ndw)
	if ndw > 0 && nfp < ndw {
		fmt.Printf(" (frame pointers lost %.0f%%)", 100*float64(ndw-nfp)/float64(ndw))
	}
	fmt.Printf("\nthreads whose stack reaches the thread's root: frame pointers %d of %d, DWARF %d of %d\n",
		stacks.Complete(fp), len(fp.Threads), stacks.Complete(dw), len(dw.Threads))
	return nil
}

func countFrames(r *output.Report) int {
	n := 0
	for _, t := range r.Threads {
		n += len(t.Frames)
	}
	return n
}
