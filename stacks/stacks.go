// Package stacks unwinds every thread of a target (package target: a
// set of contexts over one memory and address space, whatever captured
// it) and produces a symbolized output.Report. It is the glue between the
// unwinder core, the symbolizer and the outputs.
package stacks

import (
	"github.com/rewindstack/rewind/internal/goruntime"
	"github.com/rewindstack/rewind/output"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// Options select what to unwind and how.
type Options struct {
	Unwinder *unwind.Unwinder
	// Threads restricts the report to these TIDs (all when empty).
	Threads []int
}

// Walked is one thread's or fiber's walk, not yet symbolized.
type Walked struct {
	TID   int
	Name  string
	Stack unwind.Stack
	// Fiber is the fiber's context (nil for a thread); its Err is set when
	// the context could not be read, and Stack is then empty.
	Fiber *target.Context
	// Context is a thread's context (nil for a fiber): its interpreted
	// frames (Context.Interp) are spliced into the thread's stack.
	Context *target.Context
}

// Walk unwinds every selected thread, and every fiber (target.KindFiber
// contexts, all of them whatever threads are selected). It reads the
// target's memory but no files beyond the unwind tables, so a live target
// can be resumed right after it (see --lazy).
func Walk(t *target.Target, opt Options) []Walked {
	want := map[int]bool{}
	for _, tid := range opt.Threads {
		want[tid] = true
	}
	var out []Walked
	for i := range t.Contexts {
		c := &t.Contexts[i]
		if c.Kind == target.KindFiber {
			w := Walked{TID: c.TID, Name: c.Name, Fiber: c}
			if c.Err == nil {
				w.Stack = opt.Unwinder.Walk(c.Regs, t.Memory(c), t.Space)
			}
			out = append(out, w)
			continue
		}
		if c.Kind != target.KindThread || c.Err != nil || (len(want) > 0 && !want[c.TID]) {
			continue
		}
		out = append(out, Walked{TID: c.TID, Name: c.Name, Stack: opt.Unwinder.Walk(c.Regs, t.Memory(c), t.Space), Context: c})
	}
	return out
}

// Report symbolizes walks into a report.
func Report(t *target.Target, walks []Walked, sym *symbolize.Symbolizer) *output.Report {
	rep := &output.Report{PID: t.PID, Source: t.Source, Threads: make([]output.Thread, 0, len(walks))}
	// Every frame is announced first, so that a large debug file is read
	// once, only as far as its last unit holding one of them.
	var want []symbolize.Want
	for i := range walks {
		for _, f := range walks[i].Stack.Frames {
			want = append(want, symbolize.Want{Map: f.Map, PC: f.PC, Exact: f.Exact})
		}
	}
	sym.Prepare(want)
	for i := range walks {
		w := &walks[i]
		th := Symbolize(w.TID, w.Name, &w.Stack, sym)
		if w.Context != nil && w.Context.Stopped != target.StopUnknown {
			stopped := w.Context.Stopped == target.StopStopped
			th.Stopped = &stopped
		}
		if w.Fiber == nil {
			if w.Context != nil {
				c := w.Context
				if len(c.Interp) > 0 {
					th.Frames = withInterp(th.Frames, c.Interp, holdingFrame(&w.Stack, th.Frames))
				}
			}
			rep.Threads = append(rep.Threads, th)
			continue
		}
		rep.Fibers = append(rep.Fibers, fiberOutput(w.Fiber, th))
	}
	return rep
}

// Unwind walks every selected thread and symbolizes the frames.
func Unwind(t *target.Target, opt Options, sym *symbolize.Symbolizer) *output.Report {
	return Report(t, Walk(t, opt), sym)
}

// Symbolize converts one walk into an output thread.
func Symbolize(tid int, name string, st *unwind.Stack, sym *symbolize.Symbolizer) output.Thread {
	out := output.Thread{TID: tid, Name: name, End: st.End.String(), EndDetail: st.Detail,
		Frames: make([]output.Frame, 0, len(st.Frames))}
	for i := range st.Frames {
		f := &st.Frames[i]
		// One output frame per function activation: the inlined calls at
		// the frame's address (when sym.Inlines is set), innermost first,
		// then the physical function; all share the PC and the method.
		for _, loc := range sym.Frame(f.Map, f.PC, f.Exact) {
			out.Frames = append(out.Frames, output.Frame{
				PC:       f.PC,
				Function: loc.Function,
				Offset:   loc.Offset,
				Module:   loc.Module,
				File:     loc.File,
				Line:     loc.Line,
				Inlined:  loc.Inlined,
				Method:   f.Method.String(),
				Symbol:   loc.Mangled,
				JIT:      loc.JIT,
			})
		}
		if sym.TailCalls && i+1 < len(st.Frames) {
			out.Frames = appendTailCalls(out.Frames, f, &st.Frames[i+1], sym)
		}
	}
	return out
}

// appendTailCalls appends the frames of the functions that left by a tail
// call between frame f and its caller (see symbolize.Symbolizer.TailCalls),
// each with the inlined calls at its tail-call site when sym.Inlines is set.
func appendTailCalls(frames []output.Frame, f, caller *unwind.Frame, sym *symbolize.Symbolizer) []output.Frame {
	virtual := sym.TailCallFrames(symbolize.Want{Map: f.Map, PC: f.PC, Exact: f.Exact},
		symbolize.Want{Map: caller.Map, PC: caller.PC, Exact: caller.Exact})
	for _, v := range virtual {
		for _, loc := range sym.Frame(v.Map, v.PC, false) {
			frames = append(frames, output.Frame{
				PC:       v.PC,
				Function: loc.Function,
				Offset:   loc.Offset,
				Module:   loc.Module,
				File:     loc.File,
				Line:     loc.Line,
				Inlined:  loc.Inlined,
				Method:   unwind.MethodTailCall.String(),
			})
		}
	}
	return frames
}

// ReachesRoot reports whether a thread's stack ends in a thread root
// function (goruntime.IsRoot) within its outermost three frames, i.e. is
// complete.
func ReachesRoot(t *output.Thread) bool {
	for i := len(t.Frames) - 1; i >= 0 && i >= len(t.Frames)-3; i-- {
		if goruntime.IsRoot(t.Frames[i].Function) {
			return true
		}
	}
	return false
}

// Complete counts the threads of a report whose stacks reach the root.
func Complete(r *output.Report) int {
	n := 0
	for i := range r.Threads {
		if ReachesRoot(&r.Threads[i]) {
			n++
		}
	}
	return n
}

// fiberOutput is a fiber's report entry: its identity from the context,
// its stack from th.
func fiberOutput(c *target.Context, th output.Thread) output.Fiber {
	f := output.Fiber{Kind: c.Runtime, Context: c.Saved, End: th.End, EndDetail: th.EndDetail,
		Frames: withInterp(th.Frames, c.Interp, nil), NeverRan: c.NeverRan}
	if c.TID != 0 {
		tid := c.TID
		f.Thread = &tid
	}
	if c.HasID {
		id := c.ID
		f.ID = &id
	}
	if c.Name != "" {
		name := c.Name
		f.Name = &name
	}
	if c.Err != nil {
		f.End, f.EndDetail = "unreadable-context", c.Err.Error()
	}
	return f
}

// withInterp inserts interpreted frames before native frames, by
// target.Splice: the frames of activation k before the native frame
// whose stack holds the activation's anchor (holding, nil when no stack
// is known) when every activation has one, else before the k-th physical
// frame of the runtime's entry function; those of activations with no
// such frame at the end.
func withInterp(frames []output.Frame, interp []target.InterpStack, holding func(uint64) int) []output.Frame {
	if len(interp) == 0 {
		return frames
	}
	n := len(frames)
	for i := range interp {
		n += len(interp[i].Frames)
	}
	out := make([]output.Frame, 0, n)
	target.Splice(interp, outputStack{frames, holding}, target.SpliceOptions{},
		func(i int) { out = append(out, frames[i]) },
		func(in *target.InterpFrame) { out = append(out, interpOutput(in)) })
	return out
}

// outputStack is a thread's symbolized frames as the native side of
// target.Splice.
type outputStack struct {
	frames  []output.Frame
	holding func(uint64) int
}

func (s outputStack) Len() int { return len(s.frames) }

func (s outputStack) IsEntry(i int, fn string) bool {
	return s.frames[i].Function == fn && !s.frames[i].Inlined
}

// PhysPC is frame i's address in its function: the leaf's PC, a
// caller's return address - 1 (the call is before it).
func (s outputStack) PhysPC(i int) uint64 {
	f := &s.frames[i]
	if f.Inlined || f.Interpreted || f.PC == 0 {
		return 0
	}
	if i > 0 {
		return f.PC - 1
	}
	return f.PC
}

func (s outputStack) Holding(addr uint64) int {
	if s.holding == nil {
		return -1
	}
	return s.holding(addr)
}

// holdingFrame returns the function that finds the output frame (of
// frames, symbolized from st) of the physical frame whose stack holds an
// address: between its SP and its caller's; nil when the output frames
// do not match st's physical frames one to one.
func holdingFrame(st *unwind.Stack, frames []output.Frame) func(uint64) int {
	phys := make([]int, 0, len(st.Frames))
	for i := range frames {
		if frames[i].Method != unwind.MethodTailCall.String() && !frames[i].Inlined {
			phys = append(phys, i)
		}
	}
	if len(phys) != len(st.Frames) {
		return nil
	}
	return func(addr uint64) int {
		for i := 0; i+1 < len(st.Frames); i++ {
			if sp := st.Frames[i].SP; sp != 0 && sp <= addr && addr < st.Frames[i+1].SP {
				return phys[i]
			}
		}
		return -1
	}
}

// interpOutput is an interpreted frame as output shows it.
func interpOutput(in *target.InterpFrame) output.Frame {
	return output.Frame{Function: in.Function, File: in.File, Line: in.Line, Method: in.Method,
		Interpreted: true, ParenLocation: in.ParenLocation}
}
