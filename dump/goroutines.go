package dump

import (
	"github.com/rewindstack/rewind/corefile"
	"github.com/rewindstack/rewind/goroutines"
	"github.com/rewindstack/rewind/goroutines/traceback"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/target"
)

// LiveGoroutines lists the goroutines of the live Go program pid (Go 1.22
// or later), its threads and goroutines copied in one pause kept to
// opt.MaxPause. The report is written as Go's own traceback prints it by
// package traceback's writers. Of opt, the unwinder, the cache, the
// process-wide settings, MaxStack, MaxPause and the callbacks apply.
func LiveGoroutines(pid int, opt Options) (*traceback.Report, error) {
	p := newGoroutinePipe(opt)
	defer p.finish()
	snap, set, err := goroutines.Capture(pid, live.Options{MaxStack: opt.MaxStack, MaxPause: opt.MaxPause, StaggerDuring: true})
	if err != nil {
		return nil, err
	}
	p.mark("capture")
	if opt.Paused != nil {
		opt.Paused(snap, set)
	}
	tg := snap.Target(p.objs, p.warn)
	p.mark("open")
	rep := traceback.New(set, tg, p.u, p.sym)
	rep.PauseUS = new(snap.Pause.Microseconds())
	p.mark("unwind+symbolize")
	return rep, nil
}

// CoreGoroutines lists the goroutines of the Go program whose core file
// is at path, as LiveGoroutines does. A damaged core's report comes with
// the error saying so, as Core's does.
func CoreGoroutines(path string, opt Options) (*traceback.Report, error) {
	p := newGoroutinePipe(opt)
	defer p.finish()
	c, err := corefile.Open(path)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	cs, err := p.setupCore(c)
	if err != nil {
		return nil, err
	}
	var tg *target.Target
	if tg, err = c.Target(p.objs, cs.exe, cs.unnamedFiles(c)...); err != nil {
		return nil, err
	}
	set, err := goroutines.FromCore(c, cs.coreExe(c, p.objs))
	if err != nil {
		return nil, err
	}
	p.mark("open")
	rep := traceback.New(set, tg, p.u, p.sym)
	p.mark("unwind+symbolize")
	return rep, cs.damaged
}

// newGoroutinePipe is newPipe for a goroutine dump, which lists inlined
// calls as frames, as Go's traceback does.
func newGoroutinePipe(opt Options) *pipe {
	p := newPipe(opt)
	p.sym.Inlines = true
	return p
}
