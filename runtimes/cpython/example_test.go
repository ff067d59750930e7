package cpython_test

import (
	"fmt"

	"github.com/rewindstack/rewind/internal/procmaps"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/runtimes"
	"github.com/rewindstack/rewind/runtimes/cpython"
)

// The Python stacks of a running CPython process, read in the same pause
// as its threads' registers and stacks.
func ExampleNewLive() {
	pid := 1234 // a python3.12 process
	maps, err := procmaps.Read(pid)
	if err != nil {
		fmt.Println(err)
		return
	}
	rt, err := cpython.Find(maps, live.NewReader(pid), runtimes.ProcessFile(pid))
	if rt == nil {
		fmt.Println("no Python frames:", err) // none mapped, or an unknown version
		return
	}
	py := cpython.NewLive(pid, rt)
	py.Prepare()
	snap, err := live.Capture(pid, live.Options{During: py.During})
	if err != nil {
		fmt.Println(err)
		return
	}
	s, err := py.Stacks()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, th := range s.Threads {
		fmt.Println("thread", th.TID)
		for _, f := range th.Frames {
			fmt.Printf("  %s (%s:%d)\n", f.Function, f.File, f.Line)
		}
	}
	// Or spliced into the native stacks, as rewind dump prints them.
	cpython.Attach(snap.Target(nil, nil), s, nil)
}

// A code object's location table gives each instruction's line.
func ExampleLine() {
	// co_firstlineno 7; two one-line entries (kind 11: the next line),
	// of 1 and 3 code units, then one with no location.
	table := []byte{0x80 | 11<<3, 0, 1, 0x80 | 11<<3 | 2, 0, 1, 0x80 | 15<<3}
	for unit := range 6 {
		fmt.Print(cpython.Line(table, 7, unit), " ")
	}
	// Output: 8 9 9 9 -1 -1
}
