package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rewindstack/rewind/dump"
	"github.com/rewindstack/rewind/goroutines"
	"github.com/rewindstack/rewind/internal/cachefile"
	"github.com/rewindstack/rewind/live"
)

// timings records how long each phase of a command took, for --stats. A
// nil *timings records nothing.
type timings struct {
	start, last time.Time
	phases      []string
	durs        []time.Duration
	notes       []string // more lines, printed after the phases
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

// print writes one line: every phase and the total, in milliseconds. The
// time since the last mark is "output", unless the last phase was "save"
// (the cache written after the output).
func (t *timings) print() {
	if t == nil {
		return
	}
	if n := len(t.phases); n == 0 || t.phases[n-1] != "save" {
		t.mark("output")
	}
	var b strings.Builder
	for i, p := range t.phases {
		fmt.Fprintf(&b, "%s %.2f ms, ", p, float64(t.durs[i].Microseconds())/1000)
	}
	fmt.Fprintf(&b, "total %.2f ms", float64(time.Since(t.start).Microseconds())/1000)
	fmt.Fprintf(os.Stderr, "rewind: %s\n", b.String())
	for _, n := range t.notes {
		fmt.Fprintf(os.Stderr, "rewind: %s\n", n)
	}
}

// pause notes how long a live target was stopped (dump.PauseNotes), or,
// with the goroutines read in the pause, how the pause and the read went
// (dump.GoroutinePauseNotes).
func (t *timings) pause(snap *live.Snapshot, set *goroutines.Set) {
	if t == nil {
		return
	}
	if set != nil {
		t.notes = append(t.notes, dump.GoroutinePauseNotes(snap, set)...)
		return
	}
	t.notes = append(t.notes, dump.PauseNotes(snap)...)
}

// cacheDirHelp says where the persistent symbolization cache lives.
const cacheDirHelp = cachefile.Help
