package profiles

import (
	"strings"

	"github.com/rewindstack/rewind/perfdata"
	"github.com/rewindstack/rewind/symbolize"
)

// warmObjects opens, in the background, the objects a perf.data file's
// build-id list names (perf lists the ones samples hit) and finds their
// thread-root functions, which needs their symbol tables (and those of
// their separate debug files): about a millisecond per library that
// otherwise delays the first walk, done while the records are decoded.
// Unwind tables are not built here: the caller may still set where they
// are cached.
func (c *Collector) warmObjects(ids []perfdata.BuildID) {
	var paths []string
	for _, b := range ids {
		if b.CPUMode == perfdata.MiscUser && strings.HasPrefix(b.Filename, "/") {
			paths = append(paths, b.Filename)
		}
	}
	if len(paths) == 0 {
		return
	}
	go func() {
		for _, p := range paths {
			if m := c.Objects.Module(p); m.File != nil {
				symbolize.RootRanges(m)
			}
		}
	}()
}
