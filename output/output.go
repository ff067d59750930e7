// Package output renders unwound stacks: eu-stack-like text, JSON with
// stable field names, and a side-by-side comparison of two methods. It knows
// nothing about how stacks were captured.
package output

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// Report is the stacks of one process.
type Report struct {
	PID int `json:"pid"`
	// PauseUS is how long the target was stopped, in microseconds; nil for
	// sources that do not stop anything (core files).
	PauseUS *int64 `json:"pause_us,omitempty"`
	// Source describes where the stacks came from ("core FILE", "pid").
	Source  string   `json:"source,omitempty"`
	Threads []Thread `json:"threads"`
}

// Thread is one thread's stack.
type Thread struct {
	TID  int    `json:"tid"`
	Name string `json:"name"`
	// End says why the walk stopped (unwind.EndReason names).
	End       string  `json:"end"`
	EndDetail string  `json:"end_detail,omitempty"`
	Frames    []Frame `json:"frames"`
}

// Frame is one frame. PC is the current PC for frame 0 and the return
// address as stored on the stack for callers, as eu-stack and gdb print it.
type Frame struct {
	PC       uint64 `json:"pc"`
	Function string `json:"function"`
	Offset   uint64 `json:"offset"`
	Module   string `json:"module"`
	File     string `json:"file,omitempty"`
	Line     int    `json:"line,omitempty"`
	Inlined  bool   `json:"inlined"`
	Method   string `json:"method"`
}

// Name renders the frame's function as "name+0xoff", or "??" when unknown.
func (f *Frame) Name() string {
	if f.Function == "" {
		return "??"
	}
	if f.Offset == 0 {
		return f.Function
	}
	return fmt.Sprintf("%s+%#x", f.Function, f.Offset)
}

// WriteJSON writes the report as one JSON object.
func WriteJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes the report in eu-stack's layout, with the module and the
// unwind method of every frame, and the reason each walk ended.
func WriteText(w io.Writer, r *Report) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "PID %d", r.PID)
	if r.Source != "" {
		fmt.Fprintf(bw, " - %s", r.Source)
	}
	if r.PauseUS != nil {
		fmt.Fprintf(bw, " (paused %d us)", *r.PauseUS)
	}
	fmt.Fprintln(bw)
	for i := range r.Threads {
		t := &r.Threads[i]
		fmt.Fprintf(bw, "TID %d:", t.TID)
		if t.Name != "" {
			fmt.Fprintf(bw, " %s", t.Name)
		}
		fmt.Fprintln(bw)
		for j := range t.Frames {
			f := &t.Frames[j]
			fmt.Fprintf(bw, "#%-2d 0x%016x %s", j, f.PC, f.Name())
			if f.Module != "" {
				fmt.Fprintf(bw, " (%s)", filepath.Base(f.Module))
			}
			if f.File != "" {
				fmt.Fprintf(bw, " %s:%d", f.File, f.Line)
			}
			fmt.Fprintf(bw, " [%s]\n", f.Method)
		}
		fmt.Fprintf(bw, "    end: %s", t.End)
		if t.EndDetail != "" {
			fmt.Fprintf(bw, " (%s)", t.EndDetail)
		}
		fmt.Fprintln(bw)
	}
	return bw.Flush()
}

// WriteSideBySide prints two reports of the same threads in two columns,
// titled by method, so the frames one method loses are visible next to the
// frames the other finds.
func WriteSideBySide(w io.Writer, left, right *Report, ltitle, rtitle string) error {
	const col = 52
	bw := bufio.NewWriter(w)
	cell := func(t *Thread, i int) string {
		switch {
		case t == nil:
			return ""
		case i < len(t.Frames):
			f := &t.Frames[i]
			s := f.Name()
			if f.Function == "" {
				s = fmt.Sprintf("[unknown] %#x", f.PC)
			}
			if f.Module != "" {
				s += " (" + filepath.Base(f.Module) + ")"
			}
			return s
		case i == len(t.Frames):
			return "-- end: " + t.End
		}
		return ""
	}
	byTID := map[int]*Thread{}
	for i := range right.Threads {
		byTID[right.Threads[i].TID] = &right.Threads[i]
	}
	for i := range left.Threads {
		lt := &left.Threads[i]
		rt := byTID[lt.TID]
		fmt.Fprintf(bw, "TID %d %s\n", lt.TID, lt.Name)
		fmt.Fprintf(bw, "    %-*s  %s\n", col, ltitle+fmt.Sprintf(" (%d frames)", len(lt.Frames)),
			rtitle+fmt.Sprintf(" (%d frames)", frameCount(rt)))
		n := len(lt.Frames)
		if rt != nil && len(rt.Frames) > n {
			n = len(rt.Frames)
		}
		for j := 0; j <= n; j++ {
			l, r := cell(lt, j), cell(rt, j)
			if l == "" && r == "" {
				continue
			}
			mark := "  "
			if l != r && !strings.HasPrefix(l, "-- ") && !strings.HasPrefix(r, "-- ") {
				mark = "≠ "
			}
			fmt.Fprintf(bw, "  %s#%-2d %-*s  %s\n", mark, j, col-4, clip(l, col-4), r)
		}
		fmt.Fprintln(bw)
	}
	return bw.Flush()
}

func frameCount(t *Thread) int {
	if t == nil {
		return 0
	}
	return len(t.Frames)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}
