package cpython

import (
	"errors"

	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/runtimes"
	"github.com/rewindstack/rewind/target"
)

// The reader registers itself: commands find it in runtimes.All.
func init() { runtimes.Register(registered{}) }

// registered is package cpython as a runtimes.Runtime.
type registered struct{}

func (registered) Name() string { return "python" }

func (registered) Usage() string {
	return "do not show the Python frames of a CPython 3.11-3.14 process"
}

// note prefixes err, if any, with what it is about, for the warning
// line the command prints.
func note(err error) error {
	if err == nil {
		return nil
	}
	return errors.New("Python frames: " + err.Error())
}

func (registered) Live(pid int, maps []target.Mapping) (runtimes.Live, error) {
	if maps == nil {
		return nil, nil // (unreadable maps: the capture says why)
	}
	rt, err := Find(maps, live.NewReader(pid), runtimes.ProcessFile(pid))
	if rt == nil {
		return nil, note(err)
	}
	l := NewLive(pid, rt)
	l.Prepare()
	return registeredLive{l}, nil
}

func (registered) Core(tg *target.Target, warn func(string)) {
	rt, err := Find(runtimes.Maps(tg.Space), tg.Mem, runtimes.CoreFiles(tg.Space))
	if rt == nil {
		warnErr(warn, err)
		return
	}
	s, err := rt.Read(tg.Mem)
	if s != nil {
		Attach(tg, s, warn)
	}
	warnErr(warn, err)
}

func warnErr(warn func(string), err error) {
	if err = note(err); err != nil {
		warn(err.Error())
	}
}

// registeredLive is a Live as a runtimes.Live.
type registeredLive struct{ l *Live }

func (r registeredLive) During(rd *live.Reader) { r.l.During(rd) }

func (r registeredLive) Attach(tg *target.Target, warn func(string)) {
	s, err := r.l.Stacks()
	if s != nil {
		Attach(tg, s, warn)
	}
	warnErr(warn, err)
}
