package luajit

import (
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/runtimes"
	"github.com/rewindstack/rewind/target"
)

// The reader registers itself: commands find it in runtimes.All, and
// --no-lua leaves its frames out.
func init() { runtimes.Register(registered{}) }

// registered is package luajit as a runtimes.Runtime; fibers lists the
// suspended coroutines (runtimes.Options.Fibers).
type registered struct{ fibers bool }

func (registered) With(o runtimes.Options) runtimes.Runtime { return registered{fibers: o.Fibers} }

func (registered) Name() string { return Method }

func (registered) Usage() string {
	return "do not show the Lua frames (and suspended coroutines) of a LuaJIT 2.1 process"
}

func (r registered) Live(pid int, maps []target.Mapping) (runtimes.Live, error) {
	if maps == nil {
		return nil, nil // (unreadable maps: the capture says why)
	}
	f, err := Find(maps, ProcessFile(pid))
	if f == nil {
		return nil, note(err)
	}
	return &registeredLive{found: f, fibers: r.fibers}, nil
}

func (r registered) Core(tg *target.Target, warn func(string)) {
	f, err := Find(Maps(tg.Space), CoreFiles(tg.Space))
	if err = note(err); err != nil && warn != nil {
		warn(err.Error())
	}
	if f != nil {
		Read(tg, f, r.fibers, warn)
	}
}

// note prefixes err, if any, with what it is about.
func note(err error) error {
	if err == nil {
		return nil
	}
	return &noteError{err}
}

type noteError struct{ err error }

func (e *noteError) Error() string { return "Lua frames: " + e.err.Error() }

// registeredLive reads a live LuaJIT process's Lua frames from its
// target: the lua_States are found from the native stacks the pause
// copied (the VM's C frames on them), so nothing is read before the
// pause, and the Lua stacks, prototypes and coroutines are read after
// it from the process (see the package doc).
type registeredLive struct {
	found  *Found
	fibers bool
}

func (r *registeredLive) During(*live.Reader) {}

func (r *registeredLive) Attach(tg *target.Target, warn func(string)) {
	Read(tg, r.found, r.fibers, warn)
}
