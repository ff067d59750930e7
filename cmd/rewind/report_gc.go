package main

import (
	"os"
	"runtime/debug"

	"github.com/rewindstack/rewind/internal/gcdefer"
)

// reportHeapLimit is the memory Go may take during a report before the
// collector runs (see lessGC): below the 200 MB of anonymous memory a
// report may take whatever the file's size, with room for what the
// runtime does not count.
const reportHeapLimit = 160 << 20

// lessGC tunes the garbage collector for a report: nearly everything it
// allocates (samples, stacks, locations) lives to the end, so collections
// find little garbage, and they were a fifth of rewind report's time.
// Nothing is collected until the memory Go takes reaches
// reportHeapLimit; then the collector runs to stay under it, whatever
// the file's size. Before, the limit was 512 MiB plus 4 times the file's
// size: a 318 MB system-wide recording (14,658 distinct stacks, 40,641
// locations) took 415 MB of anonymous memory, most of it garbage (walk
// memos of exited threads, the section data symbol tables were decoded
// from, copies of growing maps). A profile whose distinct stacks take
// more than the limit has the collector run often, at most half the
// CPU (the runtime's limiter), and goes past it. A GOGC or GOMEMLIMIT
// the user set is kept. The returned function restores the default
// collector (for what the process does after the report, the tests).
func lessGC() (restore func()) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	// (Not the settings main's gcdefer.Until restores at the first
	// collection, which would lift the limit.)
	gc, limit := gcdefer.Cancel()
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(reportHeapLimit)
	return func() {
		debug.SetGCPercent(gc)
		debug.SetMemoryLimit(limit)
	}
}
