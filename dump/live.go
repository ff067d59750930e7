package dump

import (
	"errors"
	"os"
	"slices"

	"github.com/rewindstack/rewind/fibers"
	"github.com/rewindstack/rewind/internal/procmaps"
	"github.com/rewindstack/rewind/internal/taskiter"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/output"
	"github.com/rewindstack/rewind/runtimes"
	"github.com/rewindstack/rewind/stacks"
	"github.com/rewindstack/rewind/target"
)

// Live dumps every thread of process pid, with the fibers and runtimes'
// frames opt asks for. When the process exits after some threads were
// copied, it returns their report and the error wrapping live.ErrExited.
// Unless opt.Lazy, the objects are opened while the process is being
// stopped.
func Live(pid int, opt Options) (*output.Report, error) {
	p := newPipe(opt)
	defer p.finish()
	lopt, unload := p.inPlace(live.Options{MaxStack: opt.MaxStack, MaxStopped: opt.MaxStopped, MaxPause: opt.MaxPause, Threads: opt.Threads})
	defer unload()
	fc, found, err := p.liveFibers(pid, &lopt)
	if err != nil {
		return nil, err
	}
	maps, _ := procmaps.Read(pid) // nil: the capture says why
	rts := p.liveRuntimes(pid, maps)
	lopt.During = runtimes.During(lopt.During, rts) // after the fibers' own
	lv := &liveDump{p: p, pid: pid, lopt: lopt, fc: fc, rts: rts, found: found}
	if opt.Lazy {
		err = lv.lazy()
	} else {
		err = lv.capture(maps)
	}
	if lv.tg == nil {
		return nil, err
	}
	p.warnUnreadable(lv.tg.Space, lv.walks)
	rep := stacks.Report(lv.tg, lv.walks, p.sym)
	p.mark("symbolize")
	pause := lv.snap.Pause.Microseconds()
	rep.PauseUS = &pause
	if opt.Paused != nil {
		opt.Paused(lv.snap, nil)
	}
	return rep, err
}

// liveDump is a live dump under way.
type liveDump struct {
	p     *pipe
	pid   int
	lopt  live.Options
	fc    *fibers.Copier // nil: no fibers asked for
	rts   []runtimes.Live
	found []fibers.Spec // the fiber scan's, to drop phantom walks

	snap  *live.Snapshot
	tg    *target.Target // nil until unwound
	walks []stacks.Walked
}

// lazy unwinds the process while its threads are stopped.
func (lv *liveDump) lazy() error {
	var tg *target.Target
	err := live.WithStopped(lv.pid, lv.lopt, func(s *live.Snapshot) error {
		lv.snap = s
		if lv.fc != nil {
			lv.fc.During(s.Reader()) // WithStopped has no During: the threads are stopped now
		}
		for _, l := range lv.rts {
			l.During(s.Reader())
		}
		tg = s.Target(lv.p.objs, lv.p.warn)
		lv.unwind(tg)
		return nil
	})
	lv.p.mark("capture+unwind")
	if err != nil {
		return err
	}
	lv.tg = tg
	return nil
}

// capture copies the threads, with the early work (see earlyOpen) beside
// it, and unwinds the copies. A process that exited during the capture
// after some threads were copied is unwound, and the error returned
// after it.
func (lv *liveDump) capture(maps []target.Mapping) error {
	p := lv.p
	p.early = startEarly(lv.pid, p.objs, p.sym, p.readsTables(), maps)
	snap, err := live.Capture(lv.pid, lv.lopt)
	p.early.captured()
	p.mark("capture")
	var exitErr error
	if errors.Is(err, live.ErrExited) && snap != nil && len(snap.Threads) > 0 {
		// Exited during the capture: what was copied is dumped, and the
		// error said after it.
		exitErr, err = err, nil
	}
	if err != nil {
		return err
	}
	lv.snap = snap
	p.early.settle(snap, p.objs)
	tg := snap.Target(p.objs, p.warn)
	p.mark("open")
	p.preload(tg) // on the other core, while unwinding
	lv.unwind(tg)
	p.mark("unwind")
	lv.tg = tg
	return exitErr
}

// unwind adds the fibers' and runtimes' contexts to tg and walks them all.
func (lv *liveDump) unwind(tg *target.Target) {
	if lv.fc != nil {
		tg.Contexts = append(tg.Contexts, lv.fc.Contexts(tg, lv.p.warn)...)
	}
	for _, l := range lv.rts {
		l.Attach(tg, lv.p.warn)
	}
	lv.walks = dropPhantoms(stacks.Walk(tg, lv.p.stacksOptions()), lv.found)
}

// liveFibers scans process pid for fibers when asked (the specs found are
// returned, to drop phantom walks) and returns the copier of the fibers'
// stacks, set up in lopt, or nil when no fibers are asked for.
func (p *pipe) liveFibers(pid int, lopt *live.Options) (*fibers.Copier, []fibers.Spec, error) {
	specs := p.opt.Fibers
	var found []fibers.Spec
	if p.opt.FiberScan {
		var st fibers.ScanStats
		var err error
		if found, st, err = fibers.ScanLive(pid, p.opt.FiberScanLimits); err != nil {
			return nil, nil, err
		}
		if n := st.Note(); n != "" {
			p.warn(n)
		}
		specs = append(slices.Clip(specs), found...)
	}
	if !p.anyFibers() {
		return nil, found, nil
	}
	fc := fibers.NewCopier(pid, specs, p.opt.AllFibers, p.warn)
	fc.Apply(lopt)
	return fc, found, nil
}

// liveRuntimes finds each runtime asked for in process pid, whose
// mappings are maps (nil: unreadable, and the capture says why), and
// returns the readers of those it runs, ready for the pause.
func (p *pipe) liveRuntimes(pid int, maps []target.Mapping) []runtimes.Live {
	var out []runtimes.Live
	for _, r := range p.runtimes() {
		l, err := r.Live(pid, maps)
		if err != nil {
			p.warn(err.Error())
		}
		if l != nil {
			out = append(out, l)
		}
	}
	return out
}

// inPlace returns lopt for a dump that reads the threads blocked in the
// kernel without stopping them (live.Options.BlockedThreads, through a
// BPF task iterator), unless Stop, Lazy or Threads is set, and what
// unloads the iterator. Without BPF the threads are stopped, and
// InPlaceUnavailable says why.
func (p *pipe) inPlace(lopt live.Options) (_ live.Options, unload func()) {
	if p.opt.Stop || p.opt.Lazy || p.opt.Threads != nil {
		return lopt, func() {}
	}
	it, err := taskiter.Open()
	if err != nil {
		why := "root, or CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE"
		if os.Geteuid() == 0 {
			why = err.Error() // root: the kernel's own reason
		}
		if p.opt.InPlaceUnavailable != nil {
			p.opt.InPlaceUnavailable(why)
		}
		return lopt, func() {}
	}
	lopt.BlockedThreads = it.Blocked
	return lopt, func() { it.Close() }
}
