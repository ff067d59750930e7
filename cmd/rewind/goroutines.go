package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/rewindstack/rewind/corefile"
	"github.com/rewindstack/rewind/goroutines"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// goroutineDump is `rewind dump --goroutines`: the goroutines of a live Go
// program (threads and goroutines copied in one pause) or of a core file,
// printed as Go's own traceback prints them (--json, --group as for
// threads).
type goroutineDump struct {
	core        string
	lf          *locateFlags
	pos         []string
	maxStack    int
	json, group bool
	objs        *target.Objects
	u           *unwind.Unwinder
	sym         *symbolize.Symbolizer
	tm          *timings
}

func dumpGoroutines(d goroutineDump) error {
	// Go's traceback lists inlined calls as frames.
	d.sym.Inlines = true
	var set *goroutines.Set
	var tg *target.Target
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
		if tg, err = c.Target(d.objs, exe); err != nil {
			return err
		}
		if set, err = goroutines.FromCore(c, d.lf.coreExe(c, d.objs, exe)); err != nil {
			return err
		}
		d.tm.mark("open")
	case d.core == "" && len(d.pos) == 1:
		pid, err := strconv.Atoi(d.pos[0])
		if err != nil || pid <= 0 {
			return fmt.Errorf("%q is not a process ID", d.pos[0])
		}
		snap, s, err := goroutines.Capture(pid, live.Options{MaxStack: d.maxStack})
		if err != nil {
			return err
		}
		d.tm.mark("capture")
		fmt.Fprintf(os.Stderr, "rewind: %d goroutines, process paused %v\n", len(s.Goroutines), snap.Pause)
		set, tg = s, snap.Target(d.objs, warn)
		d.tm.mark("open")
	default:
		return fmt.Errorf("need a PID or --core FILE")
	}
	rep := set.Report(tg, d.u, d.sym)
	d.tm.mark("unwind+symbolize")
	var err error
	switch {
	case d.json:
		err = goroutines.WriteJSON(os.Stdout, rep)
	case d.group:
		err = goroutines.WriteGrouped(os.Stdout, rep)
	default:
		err = goroutines.WriteText(os.Stdout, rep)
	}
	if err != nil {
		return err
	}
	return d.lf.inputErr
}
