package main

import (
	"fmt"
	"strings"
	"sync"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/internal/gcdefer"

	"github.com/rewindstack/rewind/perfevent"
	"github.com/rewindstack/rewind/profiles"
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
	methods, err := profileMethods(*pf.method, *pf.maxDepth)
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
	pf.findDebug = res.DebugFile
	// The copy's size was perf record's choice.
	pf.copyEdgeHint = "perf record --call-graph dwarf,65528 copies the most"
	var missing missingFiles
	open := func(path, buildID string) (*elfobj.File, error) {
		res.Expect(path, buildID)
		f, err := res.Open(path)
		if err != nil && !strings.HasPrefix(path, "/memfd:") {
			// (A memfd has no path to find it by.)
			missing.add(path, err)
		}
		return f, err
	}
	pf.afterBuild = missing.warn
	// The symbolizer and the caches are set up first: the objects'
	// tables, symbols and debug information load while the records are
	// decoded.
	sym, dir := profileSymbolizer(pf)
	// Sections mapped, not copied: page cache is not the anonymous memory
	// a report bounds (22 MB of copies of a 2.2 GB recording's peak).
	elfobj.MapSections(true)
	defer gcdefer.LessGC()()
	builder := func(c *profiles.Collector) *profiles.Builder { return newBuilderWith(c, methods, pf, sym, dir) }
	pd, readErr := profiles.ReadPerfData(pos[0], perfevent.Arch(), profiles.ReadOptions{Warn: warn, Open: open, TablesDir: dir, Symbolizer: sym, Builder: builder})
	pf.tm.mark("read")
	if pd == nil {
		return readErr
	}
	if pd.Builder != nil && pf.tm != nil {
		took, batches, n := pd.Builder.Busy()
		pf.tm.notes = append(pf.tm.notes, fmt.Sprintf("%d samples were unwound and symbolized while the file was read, in %d batches: %.2f ms of the read phase", n, batches, float64(took.Microseconds())/1000))
	}
	// The samples' stacks point into the file's mapping. Once they are
	// unwound it is unmapped on another goroutine while the output is
	// written: unmapping a 33 MB file took 0.7 ms, the last thing the
	// report did before it exited.
	closeFile := sync.OnceValue(pd.Close)
	defer closeFile()
	pf.inputErr = readErr
	b := pd.Builder
	if b == nil {
		b = builder(pd.Collector)
	}
	if err := finishProfile(b, pd.Collector, pf, pd.PeriodNS, profileTitle(pf, "rewind report"), func() { go closeFile() }); err != nil {
		return err
	}
	return readErr
}

// missingFiles collects the mapped objects of sampled processes that could
// not be opened, to say each once: their frames print as [unknown].
type missingFiles struct {
	mu    sync.Mutex
	paths []string
	errs  map[string]error
}

func (m *missingFiles) add(path string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.errs == nil {
		m.errs = map[string]error{}
	}
	if _, ok := m.errs[path]; !ok {
		m.errs[path] = err
		m.paths = append(m.paths, path)
	}
}

// maxMissingSaid bounds the files said one by one (a system-wide
// recording can name many programs that are gone since).
const maxMissingSaid = 10

func (m *missingFiles) warn() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, p := range m.paths {
		if i == maxMissingSaid {
			warn(fmt.Sprintf("%d more mapped files are missing or unusable (frames in them print as [unknown])", len(m.paths)-i))
			break
		}
		warn(fmt.Sprintf("%v (frames in it print as [unknown]; --exe, --sysroot or DEBUGINFOD_URLS can find it)", m.errs[p]))
	}
}
