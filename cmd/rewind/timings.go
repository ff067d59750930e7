package main

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/rewindstack/rewind/goroutines"
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
	// Threads read in place (live.Options.BlockedThreads) have a stack
	// copy; a goroutine dump's threads left asleep have none, and
	// goroutinePause tells of them.
	inPlace := 0
	for _, x := range snap.Threads {
		if x.Asleep && len(x.Stack.Data) > 0 {
			inPlace++
		}
	}
	if p := snap.Phases; inPlace > 0 {
		in := fmt.Sprintf("%d of %d threads were blocked in the kernel and read in place, not stopped", inPlace, len(snap.Threads))
		if p.Woke > 0 {
			in += fmt.Sprintf("; %d more ran meanwhile and were stopped", p.Woke)
		}
		if inPlace == len(snap.Threads) {
			t.note("pause 0.00 ms: no thread stopped: " + in)
			return
		}
		t.note(in)
	}
	th := slices.DeleteFunc(slices.Clone(snap.Threads), func(x live.Thread) bool { return x.Asleep })
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

// goroutinePause notes, for --goroutines, the pause as pause does, its
// steps (see live.PausePhases), the threads left asleep rather than
// stopped (live.Options.LeaveAsleep), and the steps of the goroutines'
// read (see goroutines.ReadStats).
func (t *timings) goroutinePause(snap *live.Snapshot, set *goroutines.Set) {
	if t == nil || snap == nil || set == nil {
		return
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d.Microseconds())/1000) }
	p, st := snap.Phases, set.ReadStats
	asleep := ""
	if p.Asleep > 0 || p.Woke > 0 {
		asleep = fmt.Sprintf("%d of %d threads left asleep in the kernel, not stopped (their runs counted before and after the read: %s ms)", p.Asleep, len(snap.Threads), ms(p.Check))
		if p.Woke > 0 {
			asleep += fmt.Sprintf(", %d more ran meanwhile and were stopped, the goroutines read again", p.Woke)
		}
	}
	if p.Asleep == len(snap.Threads) {
		t.note("pause 0.00 ms: no thread stopped: " + asleep)
	} else {
		t.pause(snap)
		where := "helper thread"
		if !p.DuringOnHelper {
			where = "tracer thread"
		}
		switch {
		case snap.Staggered || p.Stop == 0:
			t.note(fmt.Sprintf("pause steps (ms): stop %s; goroutines read in %s on the %s", ms(p.Stop), ms(p.During), where))
		default:
			t.note(fmt.Sprintf("pause steps (ms): stop %s, maps %s, thread stacks %s, waiting for the goroutines %s, resume %s; goroutines read from %s to %s on the %s",
				ms(p.Stop), ms(p.Maps), ms(p.Stacks), ms(p.DuringWait), ms(p.Resume), ms(p.Stop+p.DuringStart), ms(p.Stop+p.DuringStart+p.During), where))
		}
		if asleep != "" {
			t.note(asleep)
		}
	}
	t.note(fmt.Sprintf("%d goroutines", len(set.Goroutines)))
	how := "read anew"
	if st.Again {
		how = fmt.Sprintf("compared with the read before the pause, %d stacks kept from it", st.Kept)
	}
	t.note(fmt.Sprintf("goroutines read (ms): %s: list %s, gs %s, stacks %s, labels %s (%s); CPU user %s sys %s, %d page faults; %d process_vm_readv calls, %d ranges, %d KB",
		ms(st.Wall), ms(st.List), ms(st.Gs), ms(st.Stacks), ms(st.Labels), how, ms(st.User), ms(st.Sys),
		st.Faults, st.Reads, st.Iovecs, st.Bytes>>10))
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
