package dump

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rewindstack/rewind/goroutines"
	"github.com/rewindstack/rewind/internal/textesc"
	"github.com/rewindstack/rewind/live"
)

// PauseNotes returns the lines that tell how long a live target was
// stopped and what for: waiting for its threads to stop (the slowest ones
// named), then copying and resuming; and how long each thread was
// stopped.
func PauseNotes(snap *live.Snapshot) []string {
	if snap == nil {
		return nil
	}
	var notes []string
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }
	// Threads read in place (live.Options.BlockedThreads) have a stack
	// copy; a goroutine dump's threads left asleep have none, and
	// GoroutinePauseNotes tells of them.
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
			return append(notes, "pause 0.00 ms: no thread stopped: "+in)
		}
		notes = append(notes, in)
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
		n += ", then copying and resuming " + ms(max(0, snap.Pause-snap.StopWait))
	}
	notes = append(notes, n)
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
		notes = append(notes, "stopped per thread: "+strings.Join(per, ", "))
	}
	return notes
}

// GoroutinePauseNotes returns, for a goroutine dump, the lines that tell
// of the pause as PauseNotes does, of its steps (see live.PausePhases),
// of the threads left asleep rather than stopped
// (live.Options.LeaveAsleep), and of the steps of the goroutines' read
// (see goroutines.ReadStats).
func GoroutinePauseNotes(snap *live.Snapshot, set *goroutines.Set) []string {
	if snap == nil || set == nil {
		return nil
	}
	var notes []string
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
		notes = append(notes, "pause 0.00 ms: no thread stopped: "+asleep)
	} else {
		notes = append(notes, PauseNotes(snap)...)
		where := "helper thread"
		if !p.DuringOnHelper {
			where = "tracer thread"
		}
		switch {
		case snap.Staggered || p.Stop == 0:
			notes = append(notes, fmt.Sprintf("pause steps (ms): stop %s; goroutines read in %s on the %s", ms(p.Stop), ms(p.During), where))
		default:
			notes = append(notes, fmt.Sprintf("pause steps (ms): stop %s, maps %s, thread stacks %s, waiting for the goroutines %s, resume %s; goroutines read from %s to %s on the %s",
				ms(p.Stop), ms(p.Maps), ms(p.Stacks), ms(p.DuringWait), ms(p.Resume), ms(p.Stop+p.DuringStart), ms(p.Stop+p.DuringStart+p.During), where))
		}
		if asleep != "" {
			notes = append(notes, asleep)
		}
	}
	notes = append(notes, fmt.Sprintf("%d goroutines", len(set.Goroutines)))
	how := "read anew"
	if st.Again {
		how = fmt.Sprintf("compared with the read before the pause, %d stacks kept from it", st.Kept)
	}
	notes = append(notes, fmt.Sprintf("goroutines read (ms): %s: list %s, gs %s, stacks %s, labels %s (%s); CPU user %s sys %s, %d page faults; %d process_vm_readv calls, %d ranges, %d KB",
		ms(st.Wall), ms(st.List), ms(st.Gs), ms(st.Stacks), ms(st.Labels), how, ms(st.User), ms(st.Sys),
		st.Faults, st.Reads, st.Iovecs, st.Bytes>>10))
	return notes
}

// maxPerThread bounds the threads PauseNotes lists one by one.
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
