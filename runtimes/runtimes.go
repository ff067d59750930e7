// Package runtimes is the seam between rewind and the language runtimes
// whose frames it shows beside the native ones (Python today; LuaJIT,
// Ruby and others to come). A runtime implements Runtime and registers
// itself from an init function; the commands loop over All, so adding a
// runtime changes no command, no flag table and no splicer: its package
// and a blank import in runtimes/builtin are all it takes.
//
// A runtime finds itself in a target (mappings, symbols, a core's
// notes), reads its frames for each context and hands them to the
// target's contexts as target.InterpFrame values, each marked with the
// activation (the native entry frame) that runs it; package stacks
// splices them into the native stacks. For a live target the frames are
// read twice, as fibers are: once before the threads' pause, to know
// what to read, and again in it (Live.During), so that they are of the
// same instant as the native stacks while the pause stays short.
package runtimes

import (
	"sort"
	"sync"

	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/target"
)

// Runtime is a language runtime rewind can read frames of.
type Runtime interface {
	// Name is the runtime's short name ("python"): the dump flag
	// --no-NAME leaves its frames out.
	Name() string
	// Usage is the --no-NAME flag's help text.
	Usage() string
	// Live finds the runtime in the running process pid, whose mappings
	// are maps, and reads its frames before the threads' pause. It
	// returns nil when the process does not run it; the error, when not
	// nil, says in one line why frames will be missing (warned even with
	// a nil Live: a runtime found but unreadable).
	Live(pid int, maps []target.Mapping) (Live, error)
	// Core reads the runtime's frames from a core's target (its
	// mappings, memory and notes) and attaches them to tg's contexts;
	// warn says what went wrong on the way, in one line each.
	Core(tg *target.Target, warn func(string))
}

// Options are what a dump asks of every runtime beyond its threads'
// frames.
type Options struct {
	// Fibers asks for the runtime's inactive coroutines or fibers as
	// fiber contexts of their own (the dump's --fibers): listing
	// thousands costs more than the dump of the threads.
	Fibers bool
}

// Configurable is a Runtime whose reading depends on Options: a dump
// calls With and uses the Runtime it returns.
type Configurable interface {
	Runtime
	With(Options) Runtime
}

// Live is a runtime's reader of one running process, made before the
// capture and used in it.
type Live interface {
	// During re-reads the frames in the threads' pause, through r (a
	// live.Options.During hook).
	During(r *live.Reader)
	// Attach gives tg's contexts the frames read in the pause; warn says
	// what went wrong on the way, in one line each.
	Attach(tg *target.Target, warn func(string))
}

var (
	mu  sync.Mutex
	all = map[string]Runtime{}
)

// Register adds a runtime to the registry, from the runtime package's
// init function. A second runtime of the same name is a programming
// error and panics.
func Register(r Runtime) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := all[r.Name()]; dup {
		panic("runtimes: " + r.Name() + " registered twice")
	}
	all[r.Name()] = r
}

// Unregister removes a runtime by name, for tests that register one of
// their own.
func Unregister(name string) {
	mu.Lock()
	defer mu.Unlock()
	delete(all, name)
}

// All returns the registered runtimes, by name: the order their readers
// run in, fixed so that outputs and warnings do not depend on init order.
func All() []Runtime {
	mu.Lock()
	defer mu.Unlock()
	out := make([]Runtime, 0, len(all))
	for _, r := range all {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}

// During returns a live.Options.During hook that runs prev (when not nil)
// and then each reader's During, in order.
func During(prev func(*live.Reader), readers []Live) func(*live.Reader) {
	if len(readers) == 0 {
		return prev
	}
	return func(r *live.Reader) {
		if prev != nil {
			prev(r)
		}
		for _, l := range readers {
			l.During(r)
		}
	}
}
