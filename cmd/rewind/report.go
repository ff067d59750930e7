package main

import (
	"fmt"

	"github.com/rewindstack/rewind/perfdata"
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
what was read is written, and the error is reported.`

func runReport(args []string) error {
	fs := newFlags("report", reportHelp)
	pf := addProfileFlags(fs)
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
	f, col, period, readErr := collectFile(pos[0])
	if col == nil {
		return readErr
	}
	defer f.Close() // the samples' stacks point into it
	if readErr != nil {
		warn(fmt.Sprintf("%v; writing the profile of the records before it", readErr))
	}
	if err := finishProfile(col, methods, pf, period); err != nil {
		return err
	}
	return readErr
}

// collectFile reads a perf.data file into a collector. A non-nil collector
// with an error holds the records read before the error. The file must be
// closed after the collector's samples are used.
func collectFile(path string) (*perfdata.File, *profiles.Collector, int64, error) {
	f, err := perfdata.Open(path)
	if err != nil {
		return nil, nil, 0, err
	}
	if f.FeatureErr != nil {
		warn(fmt.Sprintf("%v (build-ids not used)", f.FeatureErr))
	}
	a := f.Attrs[0]
	if a.SampleType&(perfdata.SampleCallchain|perfdata.SampleStackUser) == 0 {
		warn(fmt.Sprintf("%s has no call graphs (record with perf record --call-graph dwarf or -g): leaf frames only", path))
	}
	var period int64
	if a.Flags&perfdata.FlagFreq != 0 && a.SamplePeriod > 0 {
		period = 1e9 / int64(a.SamplePeriod)
	} else {
		period = int64(a.SamplePeriod)
	}
	col := profiles.NewCollector(perfevent.Arch())
	col.Warn = warn
	col.Borrow = true
	for _, b := range f.BuildIDs {
		if b.Filename == "[vdso]" {
			col.ExpectVDSO(b.ID)
		}
	}
	err = f.Records(func(r *perfdata.Record) error { col.Add(r); return nil })
	return f, col, period, err
}
