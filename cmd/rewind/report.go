package main

import (
	"fmt"
	"sync"

	"github.com/rewindstack/rewind/elfobj"

	"github.com/rewindstack/rewind/perfevent"
	"github.com/rewindstack/rewind/profiles"
)

const reportHelp = `rewind report [flags] perf.data

Reads a perf.data file written by perf record (--call-graph dwarf, or -g),
unwinds the samples' user stack copies with rewind (--method) — or, for -g
recordings, which carry no stack copies, takes the kernel's frame-pointer
callchain — symbolizes them from the files on this machine, prints the
fidelity table and writes the profile (-o): FILE.pb.gz (pprof),
FILE.folded, FILE.html or FILE.svg.

A truncated or corrupt file is read up to the bad record: the profile of
what was read is written, and the error is reported.
` + locateHelp

func runReport(args []string) error {
	fs := newFlags("report", reportHelp)
	pf := addProfileFlags(fs)
	lf := addLocateFlags(fs, true)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return fmt.Errorf("need one perf.data file")
	}
	methods, err := profileMethods(*pf.method, *pf.maxDepth)
	if err != nil {
		return err
	}
	if _, err := outputPath(*pf.out); err != nil {
		return err
	}
	if *pf.stats {
		pf.tm = newTimings()
		defer pf.tm.print()
	}
	res, err := lf.resolver("")
	if err != nil {
		return err
	}
	pf.findDebug = res.DebugFile
	open := func(path, buildID string) (*elfobj.File, error) {
		res.Expect(path, buildID)
		return res.Open(path)
	}
	// The symbolizer and the caches are set up first: the objects'
	// tables, symbols and debug information load while the records are
	// decoded.
	sym, dir := profileSymbolizer(pf)
	restoreGC := lessGC(pos[0])
	pd, readErr := profiles.ReadPerfDataWith(pos[0], perfevent.Arch(), profiles.ReadOptions{Warn: warn, Open: open, TablesDir: dir, Symbolizer: sym})
	restoreGC()
	pf.tm.mark("read")
	if pd == nil {
		return readErr
	}
	// The samples' stacks point into the file's mapping. Once they are
	// unwound it is unmapped on another goroutine while the output is
	// written: unmapping a 33 MB file took 0.7 ms, the last thing the
	// report did before it exited.
	closeFile := sync.OnceValue(pd.Close)
	defer closeFile()
	if readErr != nil {
		warn(fmt.Sprintf("%v; writing the profile of the records before it", readErr))
	}
	if err := finishProfile(newBuilderWith(pd.Collector, methods, pf, sym, dir), pd.Collector, pf, pd.PeriodNS, profileTitle(pf, "rewind report"), func() { go closeFile() }); err != nil {
		return err
	}
	return readErr
}
