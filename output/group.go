package output

import (
	"bufio"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/rewindstack/rewind/internal/textesc"
)

// Group is a set of threads whose stacks are identical (same PCs, same end).
type Group struct {
	TIDs   []int
	Names  []string
	Thread *Thread // the first thread of the group, whose frames stand for all
}

// GroupThreads groups identical stacks, largest group first (ties: by lowest
// TID), as pstack aggregators do: a 200-thread pool blocked in the same place
// prints once.
func GroupThreads(r *Report) []Group {
	byKey := map[string]*Group{}
	var order []*Group
	for i := range r.Threads {
		t := &r.Threads[i]
		key := stackKey(t.Frames, t.End)
		g := byKey[key]
		if g == nil {
			g = &Group{Thread: t}
			byKey[key] = g
			order = append(order, g)
		}
		g.TIDs = append(g.TIDs, t.TID)
		g.Names = append(g.Names, t.Name)
	}
	sort.SliceStable(order, func(i, j int) bool { return len(order[i].TIDs) > len(order[j].TIDs) })
	out := make([]Group, len(order))
	for i, g := range order {
		out[i] = *g
	}
	return out
}

// WriteGrouped writes the report with identical stacks printed once,
// headed by how many threads share them and which.
func WriteGrouped(w io.Writer, r *Report) error {
	bw := bufio.NewWriter(w)
	writeHeader(bw, r)
	for _, g := range GroupThreads(r) {
		fmt.Fprintf(bw, "%d thread", len(g.TIDs))
		if len(g.TIDs) > 1 {
			fmt.Fprint(bw, "s")
		}
		fmt.Fprint(bw, ":")
		for i, tid := range g.TIDs {
			fmt.Fprintf(bw, " %d", tid)
			if g.Names[i] != "" {
				fmt.Fprintf(bw, " (%s)", textesc.String(g.Names[i]))
			}
		}
		fmt.Fprintln(bw)
		writeFrames(bw, g.Thread.Frames, g.Thread.End, g.Thread.EndDetail)
	}
	writeGroupedFibers(bw, r)
	return bw.Flush()
}

// groupFibers groups identical fiber stacks of one thread, largest group
// first.
func groupFibers(r *Report) [][]*Fiber {
	byKey := map[string][]*Fiber{}
	var order []string
	for i := range r.Fibers {
		f := &r.Fibers[i]
		k := stackKey(f.Frames, f.End)
		if f.Thread != nil {
			k = strconv.Itoa(*f.Thread) + ":" + k
		}
		if byKey[k] == nil {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], f)
	}
	sort.SliceStable(order, func(i, j int) bool { return len(byKey[order[i]]) > len(byKey[order[j]]) })
	out := make([][]*Fiber, len(order))
	for i, k := range order {
		out[i] = byKey[k]
	}
	return out
}

// writeGroupedFibers prints identical fiber stacks of one thread once,
// headed by how many fibers share them, their thread, and which fibers (by
// id, else by context address).
func writeGroupedFibers(bw *bufio.Writer, r *Report) {
	names := map[int]string{}
	for i := range r.Threads {
		names[r.Threads[i].TID] = r.Threads[i].Name
	}
	for _, fs := range groupFibers(r) {
		fmt.Fprintf(bw, "%d fiber", len(fs))
		if len(fs) > 1 {
			fmt.Fprint(bw, "s")
		}
		if tid := fs[0].Thread; tid != nil {
			fmt.Fprintf(bw, " of thread %d", *tid)
			if n := names[*tid]; n != "" {
				fmt.Fprintf(bw, " (%s)", textesc.String(n))
			}
		} else {
			fmt.Fprint(bw, " of no known thread")
		}
		fmt.Fprint(bw, ":")
		for _, f := range fs {
			if f.ID != nil {
				fmt.Fprintf(bw, " %d", *f.ID)
			} else {
				fmt.Fprintf(bw, " %s@%#x", f.Kind, f.Context)
			}
		}
		fmt.Fprintln(bw)
		writeFrames(bw, fs[0].Frames, fs[0].End, fs[0].EndDetail)
	}
}

// ThreadGroup is one group of threads with identical stacks in
// WriteGroupedJSON's output.
type ThreadGroup struct {
	// Count is how many threads share the stack; TIDs and Names are
	// theirs, in the same order.
	Count int      `json:"count"`
	TIDs  []int    `json:"tids"`
	Names []string `json:"names"`
	// Frames, End and EndDetail are every thread's of the group.
	Frames    []Frame `json:"frames"`
	End       string  `json:"end"`
	EndDetail string  `json:"end_detail,omitempty"`
}

// FiberGroup is one group of fibers of one thread with identical stacks in
// WriteGroupedJSON's output.
type FiberGroup struct {
	// Count is how many fibers share the stack.
	Count int `json:"count"`
	// Thread is the fibers' thread (null when unknown).
	Thread *int `json:"thread"`
	// IDs are the fibers' ids (null for one without), Contexts the
	// addresses of their saved contexts, in the same order.
	IDs      []*int64 `json:"ids"`
	Contexts []uint64 `json:"contexts"`
	// Kind, Frames, End and EndDetail are every fiber's of the group.
	Kind      string  `json:"kind"`
	Frames    []Frame `json:"frames"`
	End       string  `json:"end"`
	EndDetail string  `json:"end_detail,omitempty"`
}

// WriteGroupedJSON writes the report as one JSON object in which threads
// with identical stacks are folded into "groups" (largest first, as
// WriteGrouped prints them), and fibers of one thread with identical
// stacks into "fiber_groups".
func WriteGroupedJSON(w io.Writer, r *Report) error {
	doc := struct {
		PID         int           `json:"pid"`
		PauseUS     *int64        `json:"pause_us,omitempty"`
		Source      string        `json:"source,omitempty"`
		Groups      []ThreadGroup `json:"groups"`
		FiberGroups []FiberGroup  `json:"fiber_groups,omitempty"`
	}{PID: r.PID, PauseUS: r.PauseUS, Source: r.Source, Groups: []ThreadGroup{}}
	for _, g := range GroupThreads(r) {
		doc.Groups = append(doc.Groups, ThreadGroup{Count: len(g.TIDs), TIDs: g.TIDs, Names: g.Names,
			Frames: g.Thread.Frames, End: g.Thread.End, EndDetail: g.Thread.EndDetail})
	}
	for _, fs := range groupFibers(r) {
		fg := FiberGroup{Count: len(fs), Thread: fs[0].Thread, Kind: fs[0].Kind, Frames: fs[0].Frames, End: fs[0].End, EndDetail: fs[0].EndDetail}
		for _, f := range fs {
			fg.IDs = append(fg.IDs, f.ID)
			fg.Contexts = append(fg.Contexts, f.Context)
		}
		doc.FiberGroups = append(doc.FiberGroups, fg)
	}
	return NewJSONEncoder(w).Encode(doc)
}

// stackKey identifies a stack for grouping: its PCs, inlined marks and end.
func stackKey(frames []Frame, end string) string {
	var key strings.Builder
	for _, f := range frames {
		key.WriteString(strconv.FormatUint(f.PC, 16))
		if f.Inlined {
			key.WriteString("i")
		}
		key.WriteByte(' ')
	}
	key.WriteString(end)
	return key.String()
}

func writeHeader(bw *bufio.Writer, r *Report) {
	fmt.Fprintf(bw, "PID %d", r.PID)
	if r.Source != "" {
		fmt.Fprintf(bw, " - %s", textesc.String(r.Source))
	}
	if r.PauseUS != nil {
		fmt.Fprintf(bw, " (paused %d us)", *r.PauseUS)
	}
	fmt.Fprintln(bw)
}

// writeFrames numbers every entry, inlined ones included, as eu-stack -i
// and gdb do; an inlined entry repeats the PC of the physical frame it
// was inlined into and says "inlined" where other frames name their method.
func writeFrames(bw *bufio.Writer, frames []Frame, end, detail string) {
	for j := range frames {
		f := &frames[j]
		if f.Interpreted {
			// An interpreted frame: no PC; fiber.info()'s "(unnamed)".
			name := f.Function
			if name == "" {
				name = "(unnamed)"
			}
			if f.ParenLocation && f.Line <= 0 && f.File != "" {
				// No line (a C function's "[C]", as debug.traceback
				// shows it): the file alone.
				fmt.Fprintf(bw, "#%-2d %-18s %s (%s) [%s]\n", j, "", textesc.String(name), textesc.String(f.File), f.Method)
				continue
			}
			if f.ParenLocation {
				fmt.Fprintf(bw, "#%-2d %-18s %s (%s:%d) [%s]\n", j, "", textesc.String(name), textesc.String(f.File), f.Line, f.Method)
				continue
			}
			fmt.Fprintf(bw, "#%-2d %-18s %s %s:%d [%s]\n", j, "", textesc.String(name), textesc.String(f.File), f.Line, f.Method)
			continue
		}
		fmt.Fprintf(bw, "#%-2d 0x%016x %s", j, f.PC, textesc.String(f.Name()))
		if f.Module != "" {
			fmt.Fprintf(bw, " (%s)", textesc.String(filepath.Base(f.Module)))
		}
		if f.JIT {
			bw.WriteString(" [jit]")
		}
		if f.File != "" {
			fmt.Fprintf(bw, " %s:%d", textesc.String(f.File), f.Line)
		}
		if f.Inlined {
			fmt.Fprintln(bw, " [inlined]")
		} else {
			fmt.Fprintf(bw, " [%s]\n", f.Method)
		}
	}
	fmt.Fprintf(bw, "    end: %s", end)
	if detail != "" {
		fmt.Fprintf(bw, " (%s)", textesc.String(detail))
	}
	fmt.Fprintln(bw)
}
