package main

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/rewindstack/rewind/internal/cachefile"
	"github.com/rewindstack/rewind/internal/textesc"
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

// pause notes how long a live target was stopped and what for: waiting
// for its threads to stop (the slowest ones named), then copying and
// resuming.
func (t *timings) pause(snap *live.Snapshot) {
	if t == nil || snap == nil {
		return
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }
	th := slices.Clone(snap.Threads)
	slices.SortFunc(th, func(a, b live.Thread) int { return cmp.Compare(b.StopLatency, a.StopLatency) })
	var slow []string
	for _, x := range th[:min(3, len(th))] {
		if x.StopLatency > 0 {
			slow = append(slow, fmt.Sprintf("%d %s %s", x.TID, textesc.String(x.Name), ms(x.StopLatency)))
		}
	}
	n := fmt.Sprintf("pause %s: threads stopped after %s", ms(snap.Pause), ms(snap.StopWait))
	if len(slow) > 0 {
		n += " (slowest: " + strings.Join(slow, ", ") + ")"
	}
	if snap.Staggered {
		n += ", staggered: threads stopped were copied and resumed while later ones were still stopping (--max-pause); the pause is the longest any thread was stopped"
	} else {
		n += ", then copying and resuming " + ms(snap.Pause-snap.StopWait)
	}
	t.notes = append(t.notes, n)
	// Each thread was stopped from its stop until it was resumed: without
	// staggering, the threads that stopped first waited longest for the
	// others.
	slices.SortStableFunc(th, func(a, b live.Thread) int { return cmp.Compare(b.Stopped, a.Stopped) })
	var per []string
	for i, x := range th {
		if x.Err == nil {
			if len(per) == maxPerThread {
				per = append(per, fmt.Sprintf("and %d more", countStopped(th[i:])))
				break
			}
			per = append(per, fmt.Sprintf("%d %s", x.TID, ms(x.Stopped)))
		}
	}
	if len(per) > 0 {
		t.notes = append(t.notes, "stopped per thread: "+strings.Join(per, ", "))
	}
}

// note adds a line that print writes after the phases.
func (t *timings) note(s string) {
	if t != nil {
		t.notes = append(t.notes, s)
	}
}

// maxPerThread bounds the threads --stats lists one by one.
const maxPerThread = 32

func countStopped(th []live.Thread) int {
	n := 0
	for _, x := range th {
		if x.Err == nil {
			n++
		}
	}
	return n
}

// cacheDirHelp says where the persistent symbolization cache lives.
const cacheDirHelp = cachefile.Help
