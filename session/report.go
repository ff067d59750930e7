package session

import (
	"fmt"
	"strings"
	"sync"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/internal/gcdefer"
	"github.com/rewindstack/rewind/locate"
	"github.com/rewindstack/rewind/perfevent"
	"github.com/rewindstack/rewind/profiles"
)

// ReportOptions says how Report reads a perf.data file and writes its
// profile.
type ReportOptions struct {
	// Resolver finds the recorded objects (locate.Resolver.Open); nil
	// opens the recorded paths.
	Resolver *locate.Resolver
	// MapSections maps the objects' sections rather than copying them
	// (elfobj.MapSections, for the whole process): page cache is not the
	// anonymous memory a report bounds (22 MB of copies of a 2.2 GB
	// recording's peak).
	MapSections bool
	// LessGC collects garbage less often while the report runs
	// (gcdefer.LessGC, for the whole process).
	LessGC bool
	// Profile says how the profile is made and written.
	Profile ProfileOptions
}

// Report reads the perf.data file at path ("-": standard input), unwinds
// its samples (or takes the kernel's callchains of a recording without
// stack copies) and writes the profile. A file that cannot be read to its
// end gets the profile of the records before the error, which is then
// returned.
func Report(path string, opt ReportOptions) error {
	po := &opt.Profile
	methods, err := po.methods()
	if err != nil {
		return err
	}
	missing := &missingFiles{warn: po.warn}
	var open func(path, buildID string) (*elfobj.File, error)
	if res := opt.Resolver; res != nil {
		open = func(path, buildID string) (*elfobj.File, error) {
			res.Expect(path, buildID)
			f, err := res.Open(path)
			if err != nil && !strings.HasPrefix(path, "/memfd:") {
				// (A memfd has no path to find it by.)
				missing.add(path, err)
			}
			return f, err
		}
	}
	// The symbolizer and the caches are set up first: the objects'
	// tables, symbols and debug information load while the records are
	// decoded.
	sym := po.symbolizer()
	if opt.MapSections {
		elfobj.MapSections(true)
	}
	if opt.LessGC {
		defer gcdefer.LessGC()()
	}
	builder := func(c *profiles.Collector) *profiles.Builder { return po.builder(c, methods, sym) }
	pd, readErr := profiles.ReadPerfData(path, perfevent.Arch(), profiles.ReadOptions{Warn: po.Warn, Open: open, TablesDir: po.CacheDir, Symbolizer: sym, Builder: builder})
	po.phase("read")
	if pd == nil {
		return readErr
	}
	if pd.Builder != nil && po.Note != nil {
		took, batches, n := pd.Builder.Busy()
		po.Note(fmt.Sprintf("%d samples were unwound and symbolized while the file was read, in %d batches: %.2f ms of the read phase", n, batches, float64(took.Microseconds())/1000))
	}
	// The samples' stacks point into the file's mapping. Once they are
	// unwound it is unmapped on another goroutine while the output is
	// written: unmapping a 33 MB file took 0.7 ms, the last thing the
	// report did before it exited.
	closeFile := sync.OnceValue(pd.Close)
	defer closeFile()
	b := pd.Builder
	if b == nil {
		b = builder(pd.Collector)
	}
	// The copy's size was perf record's choice.
	f := finish{periodNS: pd.PeriodNS, copyEdgeHint: "perf record --call-graph dwarf,65528 copies the most",
		unwound: func() { go closeFile() }, built: missing.say, inputErr: readErr}
	if err := po.finish(b, pd.Collector, f); err != nil {
		return err
	}
	return readErr
}

// missingFiles collects the mapped objects of sampled processes that could
// not be opened, to say each once: their frames print as [unknown].
type missingFiles struct {
	warn  func(string)
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

// say warns of the missing files.
func (m *missingFiles) say() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, p := range m.paths {
		if i == maxMissingSaid {
			m.warn(fmt.Sprintf("%d more mapped files are missing or unusable (frames in them print as [unknown])", len(m.paths)-i))
			break
		}
		m.warn(fmt.Sprintf("%v (frames in it print as [unknown]; --exe, --sysroot or DEBUGINFOD_URLS can find it)", m.errs[p]))
	}
}
