package profiles

import (
	"math"
	"strings"

	"github.com/rewindstack/rewind/internal/goruntime"
	"github.com/rewindstack/rewind/perfdata"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
)

// warmObjects opens, in the background, the objects a perf.data file's
// build-id list names (perf lists the ones samples hit) and finds their
// thread-root functions, which needs their symbol tables (and those of
// their separate debug files): about a millisecond per library that
// otherwise delays the first walk, done while the records are decoded.
// Their unwind tables are loaded too (where c.Objects.Tables.Dir says,
// set before), and with sym their symbols and debug information, by
// naming their entry points.
func (c *Collector) warmObjects(ids []perfdata.BuildID, sym *symbolize.Symbolizer) {
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
				goruntime.RootRanges(m)
				m.Table()
				if sym != nil {
					sym.Frame(&target.Mapping{End: math.MaxUint64, Path: p, Module: m}, m.File.Entry, true)
				}
			}
		}
	}()
}
