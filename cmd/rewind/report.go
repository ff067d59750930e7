package main

import (
	"github.com/rewindstack/rewind/session"
)

const reportHelp = `rewind report [flags] perf.data
rewind report [flags] -            read perf.data from standard input


Reads a perf.data file written by perf record (--call-graph dwarf, or -g),
unwinds the samples' user stack copies with rewind (--method) — or, for -g
recordings, which carry no stack copies, takes the kernel's frame-pointer
callchain — symbolizes them from the files on this machine, prints the
fidelity table and writes the profile (-o): FILE.pb.gz (pprof),
FILE.folded, FILE.html or FILE.svg. With - the file comes on standard
input: perf record -o - ... | rewind report -o p.html - (perf's pipe mode),
or rewind report - < perf.data.

A truncated or corrupt file is read up to the bad record: the profile of
what was read is written, and the error is reported.
` + locateHelp

func runReport(args []string) error {
	surviveBrokenPipe()
	fs := newFlags("report", reportHelp)
	pf := addProfileFlags(fs)
	lf := addLocateFlags(fs, true)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("need one perf.data file (rewind report --help lists the flags)")
	}
	methods, err := session.Methods(*pf.method, *pf.maxDepth)
	if err != nil {
		return err
	}
	out, err := outputPath(*pf.out, *pf.format)
	if err != nil {
		return err
	}
	if err := checkOutputDir(out); err != nil {
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
	opt := session.ReportOptions{Resolver: res, MapSections: true, LessGC: true, Profile: pf.options(methods)}
	opt.Profile.FindDebug = res.DebugFile
	opt.Profile.Title = profileTitle(pf, "rewind report")
	if pf.tm != nil {
		opt.Profile.Phase = pf.tm.mark
		opt.Profile.Note = func(n string) { pf.tm.notes = append(pf.tm.notes, n) }
	}
	return session.Report(pos[0], opt)
}
