// Package stacks unwinds every thread of a target — a set of threads'
// registers over one memory and address space, whatever captured it — and
// produces a symbolized output.Report. It is the glue between snapshot
// sources (core files, live processes) and the unwinder core.
package stacks

import (
	"strings"

	"github.com/rewindstack/rewind/output"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/unwind"
)

// Thread is one thread's starting registers.
type Thread struct {
	TID  int
	Name string
	Regs regs.Regs
}

// Target is everything needed to unwind a process's threads.
type Target struct {
	PID     int
	Source  string
	Threads []Thread
	Mem     unwind.Memory
	Space   *unwind.AddressSpace
}

// Options select what to unwind and how.
type Options struct {
	Unwinder *unwind.Unwinder
	// Threads restricts the report to these TIDs (all when empty).
	Threads []int
}

// Walked is one thread's walk, not yet symbolized.
type Walked struct {
	TID   int
	Name  string
	Stack unwind.Stack
}

// Walk unwinds every selected thread. It reads the target's memory but no
// files beyond the unwind tables, so a live target can be resumed right
// after it (see --lazy).
func Walk(t *Target, opt Options) []Walked {
	want := map[int]bool{}
	for _, tid := range opt.Threads {
		want[tid] = true
	}
	var out []Walked
	for _, th := range t.Threads {
		if len(want) > 0 && !want[th.TID] {
			continue
		}
		out = append(out, Walked{TID: th.TID, Name: th.Name, Stack: opt.Unwinder.Walk(th.Regs, t.Mem, t.Space)})
	}
	return out
}

// Report symbolizes walks into a report.
func Report(t *Target, walks []Walked, sym *symbolize.Symbolizer) *output.Report {
	rep := &output.Report{PID: t.PID, Source: t.Source, Threads: make([]output.Thread, 0, len(walks))}
	for i := range walks {
		w := &walks[i]
		rep.Threads = append(rep.Threads, Symbolize(w.TID, w.Name, &w.Stack, t.Space, sym))
	}
	return rep
}

// Unwind walks every selected thread and symbolizes the frames.
func Unwind(t *Target, opt Options, sym *symbolize.Symbolizer) *output.Report {
	return Report(t, Walk(t, opt), sym)
}

// Symbolize converts one walk into an output thread.
func Symbolize(tid int, name string, st *unwind.Stack, space *unwind.AddressSpace, sym *symbolize.Symbolizer) output.Thread {
	out := output.Thread{TID: tid, Name: name, End: st.End.String(), EndDetail: st.Detail,
		Frames: make([]output.Frame, 0, len(st.Frames))}
	for i := range st.Frames {
		f := &st.Frames[i]
		// One output frame per function activation: the inlined calls at
		// the frame's address (when sym.Inlines is set), innermost first,
		// then the physical function; all share the PC and the method.
		for _, loc := range sym.Frame(space, f) {
			out.Frames = append(out.Frames, output.Frame{
				PC:       f.PC,
				Function: loc.Function,
				Offset:   loc.Offset,
				Module:   loc.Module,
				File:     loc.File,
				Line:     loc.Line,
				Inlined:  loc.Inlined,
				Method:   f.Method.String(),
			})
		}
	}
	return out
}

// rootFunctions are the functions a complete stack ends in: the program
// entry, glibc's thread entry points, and the functions Go's own traceback
// treats as the top of a stack (TOPFRAME: runtime.goexit for goroutines,
// runtime.mstart and runtime.rt0_go for the g0 stacks).
var rootFunctions = map[string]bool{
	"_start": true, "__libc_start_main": true, "__libc_start_main_impl": true, "__libc_start_call_main": true,
	"start_thread": true, "clone3": true, "__clone3": true, "clone": true, "__clone": true,
	"runtime.goexit": true, "runtime.goexit.abi0": true, "runtime.mstart": true, "runtime.rt0_go": true,
}

// IsRoot reports whether function (a symbol name, with or without a symbol
// version such as @@GLIBC_2.34) is one a complete thread stack ends in.
func IsRoot(function string) bool {
	if at := strings.IndexByte(function, '@'); at > 0 {
		function = function[:at]
	}
	return rootFunctions[function]
}

// ReachesRoot reports whether a thread's stack ends in a thread root
// function (IsRoot) within its outermost three frames, i.e. is complete.
func ReachesRoot(t *output.Thread) bool {
	for i := len(t.Frames) - 1; i >= 0 && i >= len(t.Frames)-3; i-- {
		if IsRoot(t.Frames[i].Function) {
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
