package fibers_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"

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

// startTarantoolApp runs Tarantool on testdata/tarantool_app.lua, which parks
// fibers in known places, and returns its pid once it says "ready".
func startTarantoolApp() (pid int, stop func(), err error) {
	cmd := exec.Command("tarantool", "testdata/tarantool_app.lua")
	cmd.Env = append(os.Environ(), "FIBER_INFO=/dev/null")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		return 0, nil, err // the CI installs Debian's tarantool
	}
	bufio.NewReader(out).ReadString('\n')
	return cmd.Process.Pid, func() { cmd.Process.Kill(); cmd.Wait() }, nil
}

// Every inactive fiber of a Tarantool process, found through its DWARF
// types and copied in the same pause as its threads, each unwound from
// its saved libcoro context, with its Lua frames: here the functions of
// each fiber the script named, down to where its Lua code was called.
func Example_tarantool() {
	pid, stop, err := startTarantoolApp()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()

	warn := func(s string) { fmt.Fprintln(os.Stderr, s) }
	fc := fibers.NewCopier(pid, nil, true, warn)
	var opt live.Options
	fc.Apply(&opt)
	snap, err := live.Capture(pid, opt)
	if err != nil {
		fmt.Println(err)
		return
	}
	tg := snap.Target(nil, nil)
	tg.Contexts = append(tg.Contexts, fc.Contexts(tg, warn)...)
	rep := stacks.Unwind(tg, stacks.Options{Unwinder: unwind.NewAuto()}, &symbolize.Symbolizer{})

	var lines []string
	for _, f := range rep.Fibers {
		if f.Name == nil || *f.Name == "on_shutdown" || *f.Name == "lua" || strings.HasSuffix(*f.Name, ".lua") {
			continue // Tarantool's own fibers and the script's main one
		}
		var fns []string
		for _, fr := range f.Frames {
			if fr.Function == "lj_BC_FUNCC" {
				break
			}
			name := fr.Function
			if name == "" {
				name = "(unnamed)"
			}
			if fr.Interpreted {
				name = fmt.Sprintf("%s (lua:%d)", name, fr.Line)
			}
			fns = append(fns, name)
		}
		lines = append(lines, *f.Name+": "+strings.Join(fns, " < "))
	}
	sort.Strings(lines)
	fmt.Println(strings.Join(lines, "\n"))
	// Output:
	// sleeper1: fiber_yield_timeout < lbox_fiber_sleep < sleep (lua:-1) < sleeper_inner (lua:13) < (unnamed) (lua:14)
	// sleeper2: fiber_yield_timeout < lbox_fiber_sleep < sleep (lua:-1) < sleeper_inner (lua:13) < (unnamed) (lua:14)
	// sleeper3: fiber_yield_timeout < lbox_fiber_sleep < sleep (lua:-1) < sleeper_inner (lua:13) < (unnamed) (lua:14)
	// stitched: fiber_yield_timeout < lbox_fiber_sleep < sleep (lua:-1) < (unnamed) (lua:24)
	// waiter: fiber_yield_timeout < fiber_channel_get_msg_timeout < luaT_fiber_channel_get < get (lua:-1) < deep3 (lua:9) < deep2 (lua:10) < (unnamed) (lua:11)
}
