package fibers_test

import (
	"fmt"
	"os"

	"github.com/rewindstack/rewind/fibers"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/output"
	"github.com/rewindstack/rewind/stacks"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/unwind"
)

// Unwinding a coroutine parked in another process, whose libcoro
// coro_context is at a known address (from a debugger, a log line or the
// program's own symbols), together with the process's threads: the
// context and the used part of its stack are copied in the same pause.
func ExampleExplicit() {
	pid := 1234 // the process
	spec, err := fibers.ParseSpec("coro@0x55d0c0de1000")
	if err != nil {
		fmt.Println(err)
		return
	}
	warn := func(s string) { fmt.Fprintln(os.Stderr, s) }
	// auto: also every fiber of a runtime rewind recognizes (Tarantool).
	fc := fibers.NewCopier(pid, []fibers.Spec{spec}, true, warn)
	var opt live.Options
	fc.Apply(&opt)
	snap, err := live.Capture(pid, opt)
	if err != nil {
		fmt.Println(err)
		return
	}
	tg := snap.Target(nil, nil)
	tg.Contexts = append(tg.Contexts, fc.Contexts(tg, warn)...)
	rep := stacks.Unwind(tg, stacks.Options{Unwinder: unwind.NewAuto()}, &symbolize.Symbolizer{Inlines: true})
	output.WriteText(os.Stdout, rep) // threads with their fibers, then "Fibers of no known thread"
}
