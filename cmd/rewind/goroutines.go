package main

import (
	"os"
	"strconv"
	"time"

	"github.com/rewindstack/rewind/corefile"
	"github.com/rewindstack/rewind/goroutines"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// goroutineDump is `rewind dump --goroutines`: the goroutines of a live Go
// program (threads and goroutines copied in one pause, kept to
// --max-pause) or of a core file, printed as Go's own traceback prints
// them (--json, --group as for threads; --labels adds the pprof labels to
// the headers in the target Go version's syntax).
type goroutineDump struct {
	core                string
	lf                  *locateFlags
	pos                 []string
	maxStack            int
	maxPause            time.Duration
	json, group, labels bool
	objs                *target.Objects
	u                   *unwind.Unwinder
	sym                 *symbolize.Symbolizer
	tm                  *timings
}

func dumpGoroutines(d goroutineDump) error {
	// Go's traceback lists inlined calls as frames.
	d.sym.Inlines = true
	var set *goroutines.Set
	var tg *target.Target
	var pauseUS *int64
	switch {
	case d.core != "" && len(d.pos) == 0:
		c, err := corefile.Open(d.core)
		if err != nil {
			return err
		}
		defer c.Close()
		exe, err := d.lf.setupCore(c, d.objs, d.sym)
		if err != nil {
			return err
		}
		if tg, err = c.Target(d.objs, exe, d.lf.unnamedFiles(c)...); err != nil {
			return err
		}
		if set, err = goroutines.FromCore(c, d.lf.coreExe(c, d.objs, exe)); err != nil {
			return err
		}
		d.tm.mark("open")
	case d.core == "" && len(d.pos) == 1:
		pid, err := strconv.Atoi(d.pos[0])
		if err != nil || pid <= 0 {
			return usagef("%q is not a process ID", d.pos[0])
		}
		snap, s, err := goroutines.Capture(pid, live.Options{MaxStack: d.maxStack, MaxPause: d.maxPause, StaggerDuring: true})
		if err != nil {
			return err
		}
		d.tm.mark("capture")
		d.tm.goroutinePause(snap, s)
		set, tg = s, snap.Target(d.objs, warn)
		pauseUS = new(snap.Pause.Microseconds())
		d.tm.mark("open")
	default:
		return usagef("need a PID or --core FILE")
	}
	rep := set.Report(tg, d.u, d.sym)
	rep.PauseUS = pauseUS
	d.tm.mark("unwind+symbolize")
	var err error
	text := goroutines.TextOptions{Labels: d.labels}
	switch {
	case d.json && d.group:
		err = goroutines.WriteGroupedJSON(os.Stdout, rep)
	case d.json:
		err = goroutines.WriteJSON(os.Stdout, rep)
	case d.group:
		err = text.WriteGrouped(os.Stdout, rep)
	default:
		err = text.WriteText(os.Stdout, rep)
	}
	if err != nil {
		return err
	}
	return d.lf.inputErr
}
