package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rewindstack/rewind/internal/cachefile"
)

// timings records how long each phase of a command took, for --stats. A
// nil *timings records nothing.
type timings struct {
	start, last time.Time
	phases      []string
	durs        []time.Duration
}

func newTimings() *timings {
	now := time.Now()
	return &timings{start: now, last: now}
}

// mark ends the phase called name, which began at the previous mark.
func (t *timings) mark(name string) {
	if t == nil {
		return
	}
	now := time.Now()
	t.phases = append(t.phases, name)
	t.durs = append(t.durs, now.Sub(t.last))
	t.last = now
}

// print writes one line: every phase and the total, in milliseconds.
func (t *timings) print() {
	if t == nil {
		return
	}
	t.mark("output")
	var b strings.Builder
	for i, p := range t.phases {
		fmt.Fprintf(&b, "%s %.2f ms, ", p, float64(t.durs[i].Microseconds())/1000)
	}
	fmt.Fprintf(&b, "total %.2f ms", float64(time.Since(t.start).Microseconds())/1000)
	fmt.Fprintf(os.Stderr, "rewind: %s\n", b.String())
}

// cacheDirHelp says where the persistent symbolization cache lives.
const cacheDirHelp = cachefile.Help
