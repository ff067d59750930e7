package traceback

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/rewindstack/rewind/internal/textesc"
	"github.com/rewindstack/rewind/output"
)

// Go's traceback prints at most this many frames of a goroutine: the
// innermost and outermost halves, with a line counting what it left out.
const (
	innerFrames = 50
	outerFrames = 50
)

// TextOptions choose what the text outputs print beyond Go's default
// traceback.
type TextOptions struct {
	// Labels prints each goroutine's pprof labels in its header as the
	// target's Go version prints them with GODEBUG=tracebacklabels=1
	// (Report.GoVersion; see labels.go). Without it no header carries
	// labels, as Go's own default traceback (the labels stay in the JSON
	// output): tools that parse Go dumps (panicparse) read neither
	// syntax whole.
	Labels bool
}

// WriteText writes the report as TextOptions{}.WriteText does.
func WriteText(w io.Writer, r *Report) error { return TextOptions{}.WriteText(w, r) }

// WriteGrouped writes the report as TextOptions{}.WriteGrouped does.
func WriteGrouped(w io.Writer, r *Report) error { return TextOptions{}.WriteGrouped(w, r) }

// WriteText writes the report in the format of Go's own traceback (the
// SIGQUIT dump, pprof's goroutine profile with debug=2), so that tools
// that parse Go dumps read it:
//
//	goroutine 7 [chan receive, 3 minutes]:
//	main.worker(...)
//		/src/main.go:12 +0x45
//	created by main.main in goroutine 1
//		/src/main.go:30 +0x7f
//
// Arguments are elided as "(...)". Notes follow, after the goroutines.
// Control bytes in names, file names and notes (they come from the
// target) are printed as \xNN.
func (o TextOptions) WriteText(w io.Writer, r *Report) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	syn := labelSyntaxOf(r.GoVersion)
	for i := range r.Goroutines {
		if i > 0 {
			bw.WriteByte('\n')
		}
		e := &r.Goroutines[i]
		o.writeHeader(bw, e, nil, syn)
		writeBody(bw, e)
	}
	writeNotes(bw, r.Notes)
	return bw.Flush()
}

// WriteGrouped writes goroutines with identical stacks (same state, wait
// reason, frames and creator; and labels when they are printed) once, in
// Go's format: a group of more than one prints its first goroutine's
// header with how many share the stack and their ids as one more item in
// the brackets, which parsers of Go dumps (panicparse) pass over as they
// pass over "locked to thread":
//
//	goroutine 7 [chan receive, 3 minutes, 281 goroutines: 7 8 9 ... (261 more)]:
//
// Groups come largest first.
func (o TextOptions) WriteGrouped(w io.Writer, r *Report) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	syn := labelSyntaxOf(r.GoVersion)
	for i, g := range groupEntries(r, o.Labels) {
		if i > 0 {
			bw.WriteByte('\n')
		}
		var ids []int64
		if len(g) > 1 {
			ids = make([]int64, len(g))
			for j, e := range g {
				ids[j] = e.ID
			}
		}
		o.writeHeader(bw, g[0], ids, syn)
		writeBody(bw, g[0])
	}
	writeNotes(bw, r.Notes)
	return bw.Flush()
}

// groupEntries folds the goroutines of r with identical stacks (and
// labels, when labels is set), largest group first, each group in the
// report's order.
func groupEntries(r *Report, labels bool) [][]*Entry {
	var order []string
	groups := map[string][]*Entry{}
	for i := range r.Goroutines {
		e := &r.Goroutines[i]
		k := groupKey(e, labels)
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], e)
	}
	sort.SliceStable(order, func(i, j int) bool { return len(groups[order[i]]) > len(groups[order[j]]) })
	out := make([][]*Entry, len(order))
	for i, k := range order {
		out[i] = groups[k]
	}
	return out
}

// WriteJSON writes the report as one JSON object: "pid", "go_version",
// "pause_us" (a live target's pause), "notes" and a "goroutines" list of
// {"id", "status", "wait_reason", "wait_minutes", "thread", "labels",
// "created_by", "frames"}.
func WriteJSON(w io.Writer, r *Report) error {
	return output.NewJSONEncoder(w).Encode(r)
}

// Group is goroutines with identical stacks and labels, as WriteGroupedJSON
// folds them.
type Group struct {
	// Count is how many goroutines share the stack, IDs which.
	Count int     `json:"count"`
	IDs   []int64 `json:"ids"`
	// Status, WaitReason, Labels, CreatedBy, Frames, End and EndDetail
	// are those of every goroutine of the group.
	Status     string            `json:"status"`
	WaitReason string            `json:"wait_reason"`
	Labels     map[string]string `json:"labels"`
	// WaitMinutesMin and WaitMinutesMax bound the goroutines' wait
	// minutes (-1 when unknown).
	WaitMinutesMin int64 `json:"wait_minutes_min"`
	WaitMinutesMax int64 `json:"wait_minutes_max"`
	// Threads are the TIDs of the group's goroutines that run on one.
	Threads   []int          `json:"threads,omitempty"`
	CreatedBy *Creator       `json:"created_by"`
	Frames    []output.Frame `json:"frames"`
	End       string         `json:"end"`
	EndDetail string         `json:"end_detail,omitempty"`
}

// WriteGroupedJSON writes the report as one JSON object whose "groups"
// list folds goroutines with identical stacks and labels (as
// WriteGrouped, labels always counting), largest first.
func WriteGroupedJSON(w io.Writer, r *Report) error {
	doc := struct {
		PID       int      `json:"pid,omitempty"`
		GoVersion string   `json:"go_version,omitempty"`
		PauseUS   *int64   `json:"pause_us,omitempty"`
		Groups    []Group  `json:"groups"`
		Notes     []string `json:"notes,omitempty"`
	}{PID: r.PID, GoVersion: r.GoVersion, PauseUS: r.PauseUS, Groups: []Group{}, Notes: r.Notes}
	for _, g := range groupEntries(r, true) {
		f := g[0]
		out := Group{Count: len(g), Status: f.Status, WaitReason: f.WaitReason, Labels: f.Labels,
			WaitMinutesMin: f.WaitMinutes, WaitMinutesMax: f.WaitMinutes, CreatedBy: f.CreatedBy, Frames: f.Frames,
			End: f.End, EndDetail: f.EndDetail}
		for _, e := range g {
			out.IDs = append(out.IDs, e.ID)
			out.WaitMinutesMin = min(out.WaitMinutesMin, e.WaitMinutes)
			out.WaitMinutesMax = max(out.WaitMinutesMax, e.WaitMinutes)
			if e.Thread != nil {
				out.Threads = append(out.Threads, *e.Thread)
			}
		}
		doc.Groups = append(doc.Groups, out)
	}
	return output.NewJSONEncoder(w).Encode(doc)
}

func idList(ids []int64) string {
	var b strings.Builder
	for i, id := range ids {
		if i == 20 {
			fmt.Fprintf(&b, " ... (%d more)", len(ids)-20)
			break
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatInt(id, 10))
	}
	return b.String()
}

func groupKey(e *Entry, labels bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%s|%v|%v|%v\n", e.Status, e.WaitReason, e.scan, e.locked, e.err)
	if labels {
		for _, k := range sortedLabels(e.Labels) {
			fmt.Fprintf(&b, "%q=%q,", k, e.Labels[k])
		}
		b.WriteByte('\n')
	}
	for _, f := range e.Frames {
		fmt.Fprintf(&b, "%s|%s|%d|%#x|%v\n", f.Function, f.File, f.Line, f.Offset, f.Inlined)
	}
	if c := e.CreatedBy; c != nil {
		fmt.Fprintf(&b, "%s|%s|%d|%#x\n", c.Function, c.File, c.Line, c.Offset)
	}
	return b.String()
}

// writeHeader prints "goroutine N [state, M minutes, locked to
// thread]:", with the group's count and ids when ids is not empty, and the
// labels in syntax syn when o.Labels is set.
func (o TextOptions) writeHeader(w *bufio.Writer, e *Entry, ids []int64, syn labelSyntax) {
	state := e.Status
	if e.WaitReason != "" {
		state = e.WaitReason
	}
	// The wait reasons are the target's own strings (its
	// runtime.waitReasonStrings).
	fmt.Fprintf(w, "goroutine %d [%s", e.ID, textesc.String(state))
	if e.scan {
		w.WriteString(" (scan)")
	}
	if e.WaitMinutes >= 1 {
		fmt.Fprintf(w, ", %d minutes", e.WaitMinutes)
	}
	if e.locked {
		w.WriteString(", locked to thread")
	}
	if len(ids) > 0 {
		fmt.Fprintf(w, ", %d goroutines: %s", len(ids), idList(ids))
	}
	labels := o.Labels && len(e.Labels) > 0
	if labels && syn == labels126 {
		writeLabels126(w, e.Labels)
	}
	w.WriteByte(']')
	if labels && syn == labels127 {
		writeLabels127(w, e.Labels)
	}
	w.WriteString(":\n")
}

func writeBody(w *bufio.Writer, e *Entry) {
	if e.err != "" {
		fmt.Fprintf(w, "\tgoroutine running on other thread; stack unavailable (%s)\n", textesc.String(e.err))
	}
	frames := e.Frames
	if len(frames) > innerFrames+outerFrames {
		for i := range frames[:innerFrames] {
			writeFrame(w, &frames[i])
		}
		fmt.Fprintf(w, "...%d frames elided...\n", len(frames)-innerFrames-outerFrames)
		frames = frames[len(frames)-outerFrames:]
	}
	for i := range frames {
		writeFrame(w, &frames[i])
	}
	if c := e.CreatedBy; c != nil {
		fmt.Fprintf(w, "created by %s", textesc.String(c.Function))
		if c.Goroutine != 0 {
			fmt.Fprintf(w, " in goroutine %d", c.Goroutine)
		}
		fmt.Fprintf(w, "\n\t%s:%d", textesc.String(c.File), c.Line)
		if c.Offset != 0 {
			fmt.Fprintf(w, " +%#x", c.Offset)
		}
		w.WriteByte('\n')
	}
}

func writeFrame(w *bufio.Writer, f *output.Frame) {
	name := f.Function
	if name == "" {
		name = fmt.Sprintf("?? %#x", f.PC)
	}
	fmt.Fprintf(w, "%s(...)\n", textesc.String(name))
	file := f.File
	if file == "" {
		file = "?"
		if f.Module != "" {
			file = f.Module
		}
	}
	fmt.Fprintf(w, "\t%s:%d", textesc.String(file), f.Line)
	if !f.Inlined && f.Offset != 0 {
		fmt.Fprintf(w, " +%#x", f.Offset)
	}
	w.WriteByte('\n')
}

func writeNotes(w *bufio.Writer, notes []string) {
	if len(notes) == 0 {
		return
	}
	w.WriteString("\n")
	for _, n := range notes {
		fmt.Fprintf(w, "# note: %s\n", textesc.String(n))
	}
}
