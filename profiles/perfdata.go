package profiles

import (
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/locate"

	"github.com/rewindstack/rewind/perfdata"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/symbolize"
)

// PerfData is a perf.data file read into a collector.
type PerfData struct {
	File      *perfdata.File
	Collector *Collector
	// PeriodNS is the sampling period in nanoseconds (from the frequency
	// the file was recorded at).
	PeriodNS int64
	// Builder is the builder ReadOptions.Builder made when samples were
	// unwound while the file was read (see ReadOptions.Builder); nil
	// when none were, and every sample is in Collector.
	Builder *Builder
}

// ReadOptions control ReadPerfData.
type ReadOptions struct {
	// Warn receives warnings (may be nil).
	Warn func(string)
	// Open opens the recorded objects, given each path and the build-id
	// (hex) the recording saw for it ("" when none): for looking files up
	// elsewhere (a sysroot, debuginfod; see package locate). Nil opens
	// the recorded path, then perf's copy in its build-id cache.
	Open func(path, buildID string) (*elfobj.File, error)
	// TablesDir is where unwind tables are cached (the collector's
	// Objects.Tables.Dir; "" for none). It is set here, not on the
	// collector after the read: the tables load while the file is read.
	TablesDir string
	// Symbolizer, when set, is the one that will name the profile's
	// frames: it loads the symbols and debug information of the objects
	// the file lists while the records are decoded.
	Symbolizer *symbolize.Symbolizer
	// Builder, when set, makes the builder the samples of a compressed
	// file (perf record -z) are unwound into while it is read, once
	// they pass pendingSoft bytes (their stack copies, and
	// pendingRecord bytes a sample): their records are decompressed into
	// memory that is reused, so the copies are the collector's, and a
	// file whose records expand a thousandfold (a decompression bomb,
	// or a long recording) would keep them all. The result's Builder is
	// the one made (it holds those samples), and its Collector the
	// samples not unwound yet. With it, a file that is not compressed
	// and larger than streamMin is unwound the same way, copied a part
	// at a time into memory reused once its samples are (see
	// perfdata.OpenStream). Nil: every sample waits in the Collector.
	Builder func(*Collector) *Builder
}

// The samples of a compressed file are unwound while it is read once
// their stack copies and records (counted as pendingRecord bytes each)
// pass pendingSoft bytes: those taken before the last round perf finished
// (a FINISHED_ROUND record: records of every CPU before it have been
// written), or every one once they pass pendingHard (a file without
// rounds, or whose samples are all at one time). A pending -g sample
// takes about 340 bytes (the Sample, its event, its callchain).
// (Variables for the tests.)
var (
	pendingSoft   = 32 << 20
	pendingHard   = 64 << 20
	pendingRecord = 512
)

// pending is what the collector's pending samples take, as far as the
// unwinding while reading goes.
func (c *Collector) pending() int { return c.PendingBytes() + pendingRecord*len(c.events) }

// ReadPerfData reads a perf.data file (perf record --call-graph dwarf,
// or -g) into a collector for arch; it is the one way rewind opens a
// recording, whatever the options. The samples borrow the file's memory:
// Close the result only when done with the profile. When the file is
// truncated or a record is corrupt, the result holds the records before
// the bad one and the error says where it is.
//
// While the records are decoded, the objects the file's build-id list
// names (perf lists those samples hit) are opened in the background, and
// their thread roots, unwind tables and, with opt.Symbolizer, symbols and
// debug information are loaded: on two cores this was the first
// milliseconds of unwinding, when the walks and the first stacks' names
// waited for them.
func ReadPerfData(path string, arch regs.Arch, opt ReadOptions) (*PerfData, error) {
	warn, open := opt.Warn, opt.Open
	var f *perfdata.File
	var err error
	if opt.Builder != nil {
		// Unwound while it is read, a large file is copied a part at a
		// time into memory that is reused (see perfdata.OpenStream).
		f, err = perfdata.OpenStream(path, streamMin)
	} else {
		f, err = perfdata.Open(path)
	}
	if err != nil {
		return nil, err
	}
	if f.FeatureErr != nil && warn != nil {
		warn(fmt.Sprintf("%v (build-ids not used)", f.FeatureErr))
	}
	// A file of several events (perf record -e a,b) is profiled by the
	// first event perf lists (the first given with -e, the one perf
	// report shows first), not counting the dummy event perf adds for
	// side-band records; the others' samples are counted, as their
	// values (cycles, instructions, ...) cannot be added up.
	a := f.Attrs[0]
	for _, at := range f.Attrs {
		if !isDummy(at) {
			a = at
			break
		}
	}
	if a.SampleType&(perfdata.SampleCallchain|perfdata.SampleStackUser) == 0 && warn != nil {
		warn(fmt.Sprintf("%s has no call graphs (record with perf record --call-graph dwarf or -g): leaf frames only", f.Path))
	}
	p := &PerfData{File: f, Collector: NewCollector(arch)}
	if a.Flags&perfdata.FlagFreq != 0 && a.SamplePeriod > 0 {
		p.PeriodNS = 1e9 / int64(a.SamplePeriod)
	} else {
		p.PeriodNS = int64(a.SamplePeriod)
	}
	c := p.Collector
	c.Warn = warn
	c.Borrow = true
	want := map[string]string{}
	for _, b := range f.BuildIDs {
		if b.Filename == "[vdso]" {
			c.ExpectVDSO(b.ID)
		}
		if strings.HasPrefix(b.Filename, "/") && len(b.ID) > 0 {
			want[b.Filename] = hex.EncodeToString(b.ID)
		}
	}
	if open == nil {
		// The recorded path, then perf's build-id cache (~/.debug).
		r := &locate.Resolver{Warn: warn, BuildIDDirs: locate.PerfBuildIDDirs()}
		open = func(path, buildID string) (*elfobj.File, error) {
			r.Expect(path, buildID)
			return r.Open(path)
		}
	}
	if a.SampleType&perfdata.SampleStackUser != 0 {
		// Nearly every record is a sample with a stack copy: reserve
		// the events of that many, rather than copying them while the
		// slice doubles (fresh memory is page faults: the heap is not
		// collected during a report).
		// A large file is unwound a batch at a time (see streamMin):
		// its batches' events, not the file's.
		start, end := f.DataRange()
		size := end - start
		if size > streamMin {
			size = int64(pendingHard)
		}
		c.events = make([]event, 0, min(size/int64(a.SampleStackUser+64), 1<<20))
	}
	c.Objects.Open = func(path string) (*elfobj.File, error) { return open(path, want[path]) }
	c.Objects.Tables.Dir = opt.TablesDir
	c.warmObjects(f.BuildIDs, opt.Symbolizer)
	others := 0
	// roundEnd is the newest time before the last FINISHED_ROUND but
	// one, round the newest before the last; flushedAt is roundEnd when
	// samples were last taken.
	var roundEnd, round, flushedAt uint64
	compressed := false
	start, end := f.DataRange()
	// A large file's samples are unwound while it is read, as a
	// compressed file's are, and the part of its mapping they were in
	// is released (see streamMin).
	large := end-start > streamMin
	soft, hard := pendingSoft, pendingHard
	if large {
		soft, hard = min(soft, streamSoft), min(hard, streamHard)
	}
	samples := 0
	var releasedAt int64
	err = f.Records(func(r *perfdata.Record) error {
		if r.Type == perfdata.RecordSample && r.Attr != a && !isDummy(r.Attr) {
			others++
			return nil
		}
		if r.Type == perfdata.RecordFinishedRound {
			roundEnd, round = round, c.LastTime()
		}
		if r.Type == perfdata.RecordSample {
			samples++
		}
		c.Add(r)
		compressed = compressed || r.Decompressed
		if !(compressed || large) || opt.Builder == nil {
			return nil
		}
		if c.pending() <= soft {
			if !compressed && len(c.events) < 64 {
				// What no pending record borrows is released
				// as the file is read, whatever the batches (a
				// file of side-band records makes none).
				if at := f.Offset(r.Raw); at-releasedAt > streamRelease {
					releasedAt = at
					f.Release(c.firstBorrowed(f, at))
				}
			}
			return nil
		}
		if roundEnd != flushedAt || c.pending() > hard {
			if p.Builder == nil {
				p.Builder = opt.Builder(c)
				if !compressed {
					// The fidelity methods' stride is fixed by the
					// first batch: say how many samples the file
					// holds, as far as the part read tells.
					at := f.Offset(r.Raw)
					if at > start {
						p.Builder.fidelityStride(int(int64(samples) * (end - start) / (at - start)))
					}
				}
			}
			flushedAt = roundEnd
			batch := c.Take(roundEnd)
			p.Builder.Add(batch)
			c.recycle(batch)
			if c.pending() > hard {
				batch = c.Samples()
				p.Builder.Add(batch)
				c.recycle(batch)
			}
			if !compressed {
				releasedAt = f.Offset(r.Raw)
				f.Release(c.firstBorrowed(f, releasedAt))
			}
		}
		return nil
	})
	if warn != nil && others > 0 {
		warn(fmt.Sprintf("%s has %d events: the profile is of the first, %s; %d samples of the other events were left out", f.Path, len(f.Attrs), eventName(a), others))
	}
	if warn != nil && f.UnknownIDs > 0 {
		warn(fmt.Sprintf("%s: %d records of events the file does not describe were skipped", f.Path, f.UnknownIDs))
	}
	return p, err
}

// streamMin is the data size above which a file that is not compressed
// is unwound while it is read, and released as it is (see
// perfdata.File.Release): what a report keeps then grows with the
// distinct stacks, not with the file. A smaller file is unwound in one
// batch once read.
var streamMin int64 = 64 << 20 // (a variable for the tests)

// A large file's samples are unwound in smaller batches than a compressed
// file's (streamSoft and streamHard bytes, as pendingSoft and pendingHard):
// the memory its records are copied into is reused once they are, and
// the less there is, the more of it the CPU's caches hold when the
// samples are walked (2 and 3 MB rather than 4 and 6: the report of a
// 2.2 GB system-wide recording peaked 5-7 MB lower, and the 336 MB one
// took no longer). streamRelease is how far the file is read between
// two releases of what no pending record borrows.
var (
	streamSoft          = 2 << 20
	streamHard          = 3 << 20
	streamRelease int64 = 4 << 20
)

// firstBorrowed returns the offset in f of the first byte a pending
// sample borrows from it (its registers, its stack copy; its callchain is
// copied), or upTo when
// none borrows any before it.
func (c *Collector) firstBorrowed(f *perfdata.File, upTo int64) int64 {
	first := upTo
	for i := range c.events {
		s := c.events[i].smp
		if s == nil {
			continue
		}
		for _, b := range [...][]byte{s.rawRegs, s.Stack} {
			if off := f.Offset(b); off >= 0 {
				first = min(first, off)
			}
		}
	}
	return first
}

// isDummy reports whether a is the software dummy event perf adds for
// side-band records; the few samples it takes are the main event's
// (perf script lists them with the rest).
func isDummy(a *perfdata.Attr) bool {
	return a.Type == 1 && a.Config == 9 // PERF_TYPE_SOFTWARE, PERF_COUNT_SW_DUMMY
}

// Close releases the file.
func (p *PerfData) Close() error { return p.File.Close() }

// eventName names an event as perf does for the common hardware and
// software events, else by its type and config.
func eventName(a *perfdata.Attr) string {
	hw := []string{"cycles", "instructions", "cache-references", "cache-misses", "branches", "branch-misses"}
	sw := []string{"cpu-clock", "task-clock", "page-faults", "context-switches", "cpu-migrations", "minor-faults", "major-faults"}
	switch {
	case a.Type == 0 && a.Config < uint64(len(hw)):
		return hw[a.Config]
	case a.Type == 1 && a.Config < uint64(len(sw)):
		return sw[a.Config]
	}
	return fmt.Sprintf("event type %d config %#x", a.Type, a.Config)
}
