package goroutines

import (
	"bufio"
	"encoding/json"
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
func WriteText(w io.Writer, r *Report) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	for i := range r.Goroutines {
		if i > 0 {
			bw.WriteByte('\n')
		}
		e := &r.Goroutines[i]
		writeHeader(bw, e, 0)
		writeBody(bw, e)
	}
	writeNotes(bw, r.Notes)
	return bw.Flush()
}

// WriteGrouped writes goroutines with identical stacks (same state, wait
// reason, frames and creator) once, with their count and ids, in Go's
// format ("N goroutines" in place of the id, as panicparse's buckets).
func WriteGrouped(w io.Writer, r *Report) error {
	type group struct {
		first *Entry
		ids   []int64
	}
	var order []string
	groups := map[string]*group{}
	for i := range r.Goroutines {
		e := &r.Goroutines[i]
		k := groupKey(e)
		g := groups[k]
		if g == nil {
			g = &group{first: e}
			groups[k] = g
			order = append(order, k)
		}
		g.ids = append(g.ids, e.ID)
	}
	sort.SliceStable(order, func(i, j int) bool { return len(groups[order[i]].ids) > len(groups[order[j]].ids) })
	bw := bufio.NewWriterSize(w, 64<<10)
	for i, k := range order {
		if i > 0 {
			bw.WriteByte('\n')
		}
		g := groups[k]
		fmt.Fprintf(bw, "%d goroutines: %s\n", len(g.ids), idList(g.ids))
		writeHeader(bw, g.first, len(g.ids))
		writeBody(bw, g.first)
	}
	writeNotes(bw, r.Notes)
	return bw.Flush()
}

// WriteJSON writes the report as one JSON object whose "goroutines" list
// holds {"id", "status", "wait_reason", "wait_minutes", "thread",
// "labels", "created_by", "frames"}.
func WriteJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
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

func groupKey(e *Entry) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%s|%v|%v\n", e.Status, e.WaitReason, e.locked, e.err)
	for _, f := range e.Frames {
		fmt.Fprintf(&b, "%s|%s|%d|%#x|%v\n", f.Function, f.File, f.Line, f.Offset, f.Inlined)
	}
	if c := e.CreatedBy; c != nil {
		fmt.Fprintf(&b, "%s|%s|%d|%#x\n", c.Function, c.File, c.Line, c.Offset)
	}
	return b.String()
}

// writeHeader prints "goroutine N [state, M minutes, locked to thread]:";
// a group of count goroutines prints the first one's id.
func writeHeader(w *bufio.Writer, e *Entry, count int) {
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
	if len(e.Labels) > 0 {
		keys := make([]string, 0, len(e.Labels))
		for k := range e.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		w.WriteString(" labels:{")
		for i, k := range keys {
			if i > 0 {
				w.WriteString(", ")
			}
			fmt.Fprintf(w, "%s: %s", strconv.Quote(k), strconv.Quote(e.Labels[k]))
		}
		w.WriteString("}")
	}
	w.WriteString("]:\n")
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
