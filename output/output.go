// Package output renders unwound stacks: eu-stack-like text, JSON with
// stable field names, and a side-by-side comparison of two methods. It knows
// nothing about how stacks were captured.
package output

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/rewindstack/rewind/internal/textesc"
	"github.com/rewindstack/rewind/target"
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
	// Fibers are the inactive fibers and coroutines unwound from their
	// saved contexts; omitted when none were asked for.
	Fibers []Fiber `json:"fibers,omitempty"`
}

// Fiber is one inactive fiber's (or coroutine's) stack.
type Fiber struct {
	// Thread is the thread the fiber belongs to (Tarantool: its cord's);
	// null when unknown.
	Thread *int `json:"thread"`
	// Kind is what saved its context: "tarantool", "ucontext",
	// "fcontext", "coro", "jmpbuf" or "regs".
	Kind string `json:"kind"`
	// ID and Name are the runtime's, null when it has none.
	ID   *int64  `json:"id"`
	Name *string `json:"name"`
	// Context is the address of the memory holding the saved context (the
	// ucontext_t, the variable holding the fcontext_t, the coro_context,
	// the jmp_buf); 0 for registers given directly.
	Context uint64 `json:"context"`
	// End says why the walk stopped, as for threads;
	// "unreadable-context" when the context itself could not be read.
	End       string `json:"end"`
	EndDetail string `json:"end_detail,omitempty"`
	// NeverRan marks a fiber created but not started yet.
	NeverRan bool    `json:"never_ran,omitempty"`
	Frames   []Frame `json:"frames"`
}

// title is the fiber's heading line in text output.
func (f *Fiber) title() string {
	var b strings.Builder
	b.WriteString("fiber")
	if f.ID != nil {
		fmt.Fprintf(&b, " %d", *f.ID)
	}
	if f.Name != nil {
		fmt.Fprintf(&b, " %s", textesc.String(*f.Name))
	}
	if f.Context != 0 {
		fmt.Fprintf(&b, " (%s, context %#x)", f.Kind, f.Context)
	} else {
		fmt.Fprintf(&b, " (%s)", f.Kind)
	}
	if f.NeverRan {
		b.WriteString(" never ran")
	}
	return b.String()
}

// Thread is one thread's stack.
type Thread struct {
	TID  int    `json:"tid"`
	Name string `json:"name"`
	// End says why the walk stopped (unwind.EndReason names).
	End       string  `json:"end"`
	EndDetail string  `json:"end_detail,omitempty"`
	Frames    []Frame `json:"frames"`
	// Stopped says, for a live process's thread, whether it was stopped
	// to be read (false: read in place, blocked in the kernel
	// throughout); absent for cores.
	Stopped *bool `json:"stopped,omitempty"`
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
	// Method is how the frame was found (unwind.Method names: "dwarf",
	// "fp", ...); "tail-call" for a function that left by a tail call,
	// which has no frame on the stack (dump --tail-calls); the runtime's
	// name ("lua", "python") for an interpreted frame.
	Method string `json:"method"`
	// Symbol is the symbol table's name of the function when it differs
	// from Function: mangled, or with its symbol version
	// ("__libc_start_main@@GLIBC_2.34"). Physical frames only.
	Symbol string `json:"symbol,omitempty"`
	// JIT marks code a JIT compiler generated, named by its perf map
	// ("[jit]" in text).
	JIT bool `json:"jit,omitempty"`
	// Interpreted marks an interpreter's frame (a Lua or Python function
	// run by its interpreter), set by whoever splices it in: it has a
	// function, file and line but no PC, module or offset of its own.
	// JSON says it by those nulls (MarshalJSON), not by a field of its
	// own, so a runtime needs no change to the JSON schema.
	Interpreted bool `json:"-"`
	// ParenLocation, for an interpreted frame, writes its location in
	// parentheses in text ("name (file:line)", as py-spy prints Python's)
	// rather than after a space ("name file:line", as fiber.info()
	// prints Lua's): each runtime's frames look as its users know them.
	ParenLocation bool `json:"-"`
}

// MarshalJSON writes a frame as its fields say, except that an
// interpreted frame has null for what it lacks: "pc", "module" and
// "offset", and "function" when the function has no name (an anonymous
// Lua function, "(unnamed)" in text as fiber.info() prints it) or none
// that could be printed (target.InvalidName).
func (f Frame) MarshalJSON() ([]byte, error) {
	type plain Frame // the same fields, without this method
	if !f.Interpreted {
		return marshalVerbatim(plain(f))
	}
	var fn *string
	if f.Function != "" && f.Function != target.InvalidName {
		fn = &f.Function
	}
	return marshalVerbatim(struct {
		PC       *uint64 `json:"pc"`
		Function *string `json:"function"`
		Offset   *uint64 `json:"offset"`
		Module   *string `json:"module"`
		File     string  `json:"file,omitempty"`
		Line     int     `json:"line,omitempty"`
		Inlined  bool    `json:"inlined"`
		Method   string  `json:"method"`
	}{Function: fn, File: f.File, Line: f.Line, Inlined: f.Inlined, Method: f.Method})
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
	return NewJSONEncoder(w).Encode(r)
}

// NewJSONEncoder returns the encoder of every JSON document rewind
// writes: indented, and with names such as Python's "<module>" or C++'s
// "operator<" written as they are rather than as \u003c escapes.
func NewJSONEncoder(w io.Writer) *json.Encoder {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc
}

// marshalVerbatim is json.Marshal without HTML escaping (an encoder
// compacts a Marshaler's output but does not undo its escapes).
func marshalVerbatim(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// WriteText writes the report in eu-stack's layout, with the module and the
// unwind method of every frame, and the reason each walk ended.
func WriteText(w io.Writer, r *Report) error {
	bw := bufio.NewWriter(w)
	writeHeader(bw, r)
	for i := range r.Threads {
		t := &r.Threads[i]
		fmt.Fprintf(bw, "TID %d:", t.TID)
		if t.Name != "" {
			fmt.Fprintf(bw, " %s", textesc.String(t.Name))
		}
		fmt.Fprintln(bw)
		writeFrames(bw, t.Frames, t.End, t.EndDetail)
		writeFibers(bw, r, &t.TID)
	}
	writeFibers(bw, r, nil)
	return bw.Flush()
}

// writeFibers prints the fibers of thread tid, or with tid nil those of no
// known thread (under a heading of their own).
func writeFibers(bw *bufio.Writer, r *Report, tid *int) {
	heading := tid == nil
	for i := range r.Fibers {
		f := &r.Fibers[i]
		if (tid == nil) != (f.Thread == nil) || (tid != nil && *f.Thread != *tid) {
			continue
		}
		if heading {
			fmt.Fprintln(bw, "Fibers of no known thread:")
			heading = false
		}
		fmt.Fprintf(bw, "  %s:\n", f.title())
		writeFrames(bw, f.Frames, f.End, f.EndDetail)
	}
}

// WriteSideBySide prints two reports of the same threads in two columns,
// titled by method. Frames are aligned by PC, so a frame one method lost
// shows as a gap ("·") next to the frame the other found.
func WriteSideBySide(w io.Writer, left, right *Report, ltitle, rtitle string) error {
	const col = 50
	bw := bufio.NewWriter(w)
	byTID := map[int]*Thread{}
	for i := range right.Threads {
		byTID[right.Threads[i].TID] = &right.Threads[i]
	}
	for i := range left.Threads {
		lt := &left.Threads[i]
		rt := byTID[lt.TID]
		if rt == nil {
			rt = &Thread{TID: lt.TID}
		}
		fmt.Fprintf(bw, "TID %d", lt.TID)
		if lt.Name != "" {
			fmt.Fprintf(bw, " %s", textesc.String(lt.Name))
		}
		fmt.Fprintf(bw, "\n    %-*s %s\n", col, fmt.Sprintf("%s: %d frames", ltitle, len(lt.Frames)),
			fmt.Sprintf("%s: %d frames", rtitle, len(rt.Frames)))
		for _, row := range alignFrames(lt.Frames, rt.Frames) {
			l, r := "·", "·"
			if row[0] >= 0 {
				l = frameCell(&lt.Frames[row[0]])
			}
			if row[1] >= 0 {
				r = frameCell(&rt.Frames[row[1]])
			}
			fmt.Fprintf(bw, "    %-*s %s\n", col, clip(l, col), r)
		}
		fmt.Fprintf(bw, "    %-*s %s\n\n", col, "end: "+lt.End, "end: "+rt.End)
	}
	return bw.Flush()
}

func frameCell(f *Frame) string {
	s := textesc.String(f.Name())
	if f.Function == "" {
		s = fmt.Sprintf("[unknown] %#x", f.PC)
	}
	if f.Module != "" {
		s += " (" + textesc.String(filepath.Base(f.Module)) + ")"
	}
	return s
}

// alignFrames pairs frames with equal PCs, keeping both orders: each row
// holds an index into a and one into b, or -1 where that side has no
// frame. A frame of a whose PC appears later in b is a gap on a's side.
func alignFrames(a, b []Frame) [][2]int {
	var rows [][2]int
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i].PC == b[j].PC:
			rows = append(rows, [2]int{i, j})
			i++
			j++
		case i < len(a) && j < len(b) && indexPC(b[j:], a[i].PC) > 0:
			rows = append(rows, [2]int{-1, j})
			j++
		case i < len(a):
			rows = append(rows, [2]int{i, -1})
			i++
		default:
			rows = append(rows, [2]int{-1, j})
			j++
		}
	}
	return rows
}

func indexPC(fs []Frame, pc uint64) int {
	for k := range fs {
		if fs[k].PC == pc {
			return k
		}
	}
	return -1
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}
