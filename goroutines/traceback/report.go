// Package traceback names the frames of another Go program's goroutines
// (package goroutines finds them and their registers) as Go's own
// traceback shows them, and writes the result as Go prints it (the
// SIGQUIT dump, pprof's goroutine profile with debug=2) or as JSON: what
// `rewind dump --goroutines` prints. Naming frames takes package
// symbolize, a layer above the runtimes' readers (package goroutines
// among them): hence a package of its own.
package traceback

import (
	"strings"

	"github.com/rewindstack/rewind/goroutines"
	"github.com/rewindstack/rewind/output"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// Report is a goroutine dump: what `rewind dump --goroutines` prints.
type Report struct {
	PID       int    `json:"pid,omitempty"`
	GoVersion string `json:"go_version,omitempty"`
	// PauseUS is how long a live target was stopped, in microseconds
	// (as output.Report's); nil for a core file. New leaves it nil.
	PauseUS *int64 `json:"pause_us,omitempty"`
	// Goroutines are sorted by id.
	Goroutines []Entry `json:"goroutines"`
	// Notes explain goroutines dropped or cut, and data not read.
	Notes []string `json:"notes,omitempty"`
}

// Entry is one goroutine of a report.
type Entry struct {
	ID          int64  `json:"id"`
	Status      string `json:"status"`
	WaitReason  string `json:"wait_reason"`
	WaitMinutes int64  `json:"wait_minutes"`
	// Thread is the TID of the thread running it (null when none).
	Thread *int              `json:"thread"`
	Labels map[string]string `json:"labels"`
	// CreatedBy is null for the main goroutine and the runtime's own.
	CreatedBy *Creator `json:"created_by"`
	// Frames are the frames Go's traceback shows, innermost first, the
	// inlined calls as frames of their own (Inlined set); C frames of a
	// goroutine in a cgo call or system call come first.
	Frames []output.Frame `json:"frames"`
	// End says why the walk stopped (unwind.EndReason names); EndDetail
	// explains it.
	End       string `json:"end"`
	EndDetail string `json:"end_detail,omitempty"`

	scan, locked bool
	err          string
}

// Creator is where a goroutine was created: the function holding the go
// statement, its position, and the creating goroutine.
type Creator struct {
	Function  string `json:"function"`
	File      string `json:"file"`
	Line      int    `json:"line"`
	Goroutine int64  `json:"goroutine"`
	// Offset is the go statement's return address offset in Function
	// (Go prints it as +0x...).
	Offset uint64 `json:"offset"`
}

// New unwinds every goroutine of s (with the contexts of s.Contexts(tg))
// and symbolizes the frames as Go's traceback shows them. sym should have
// Inlines set (Go lists inlined calls as frames).
func New(s *goroutines.Set, tg *target.Target, u *unwind.Unwinder, sym *symbolize.Symbolizer) *Report {
	rep := &Report{PID: tg.PID, GoVersion: s.GoVersion, Notes: s.Notes, Goroutines: make([]Entry, 0, len(s.Goroutines))}
	ctxs := s.Contexts(tg)
	var st unwind.Stack
	threads := map[int]*target.Context{}
	for i := range tg.Contexts {
		if c := &tg.Contexts[i]; c.Kind == target.KindThread {
			threads[c.TID] = c
		}
	}
	for i := range s.Goroutines {
		g := &s.Goroutines[i]
		c := &ctxs[i]
		e := Entry{ID: g.ID, Status: g.Status, WaitReason: g.WaitReason, WaitMinutes: g.WaitMinutes,
			Labels: g.Labels, scan: g.Scan, locked: g.LockedToThread}
		if e.Labels == nil {
			e.Labels = map[string]string{}
		}
		if g.Thread != 0 {
			tid := g.Thread
			e.Thread = &tid
		}
		if c.Err != nil {
			e.CreatedBy = creator(g, tg, sym, showDefault)
			e.err = c.Err.Error()
			e.End, e.EndDetail = "register-unavailable", e.err
			rep.Goroutines = append(rep.Goroutines, e)
			continue
		}
		var frames []output.Frame
		// A goroutine in a system call or cgo call: the C frames the
		// thread shows below the Go code come first.
		if tid := s.SyscallThread(g); tid != 0 {
			if th := threads[tid]; th != nil {
				frames = cFrames(frames, u, &st, th, tg, sym)
			}
		}
		u.WalkInto(&st, c.Regs, tg.Memory(c), tg.Space)
		if f := &st.Frames; !g.Running() && len(*f) > 0 {
			// A saved PC is a return address (into gopark, the
			// syscall wrapper), looked up at the call as Go's
			// traceback does, unless it is a function's entry (a
			// goroutine that has not run yet).
			f0 := &(*f)[0]
			if locs := sym.Frame(f0.Map, f0.PC, true); locs[len(locs)-1].Offset != 0 {
				f0.Exact = false
			}
		}
		e.Frames = goFrames(frames, sym, st.Frames, showDefault)
		if len(e.Frames) == 0 {
			// Only runtime functions: one of the runtime's own
			// goroutines, which Go's traceback hides at the default
			// GOTRACEBACK and shows with them at GOTRACEBACK=system. A
			// goroutine with no frame at all is no traceback: tools
			// that parse Go dumps (panicparse) stop there.
			e.Frames = goFrames(frames, sym, st.Frames, showSystem)
			e.CreatedBy = creator(g, tg, sym, showSystem)
		} else {
			e.CreatedBy = creator(g, tg, sym, showDefault)
		}
		e.End, e.EndDetail = st.End.String(), st.Detail
		rep.Goroutines = append(rep.Goroutines, e)
	}
	return rep
}

// Which frames a goroutine's traceback shows, as GOTRACEBACK's levels
// choose them (and everything, for C code).
const (
	showDefault = iota // runtime functions hidden unless exported
	showSystem         // runtime functions shown too
	showAll            // C frames: every activation
)

// goFrames appends to out the frames of a goroutine's walk that its
// traceback shows at level show.
func goFrames(out []output.Frame, sym *symbolize.Symbolizer, walk []unwind.Frame, show int) []output.Frame {
	injected := false
	for j := range walk {
		f := walk[j]
		if injected {
			// The frame a signal interrupted (async preemption, a
			// fault): its PC is where it stopped, not a return
			// address, as Go's traceback treats it.
			f.Exact = true
		}
		var phys string
		out, phys = appendFramesName(out, sym, &f, show)
		injected = phys == "runtime.asyncPreempt" || phys == "runtime.sigpanic" || phys == "runtime.debugCallV2"
	}
	return out
}

// appendFrames adds the function activations at one physical frame that
// Go's traceback shows at level show.
func appendFrames(out []output.Frame, sym *symbolize.Symbolizer, f *unwind.Frame, show int) []output.Frame {
	out, _ = appendFramesName(out, sym, f, show)
	return out
}

// appendFramesName is appendFrames that also returns the physical
// function's name.
func appendFramesName(out []output.Frame, sym *symbolize.Symbolizer, f *unwind.Frame, show int) ([]output.Frame, string) {
	locs := sym.Frame(f.Map, f.PC, f.Exact)
	for _, loc := range locs {
		switch {
		case show == showAll:
		case loc.GoWrapper && show == showDefault:
			// Go hides wrappers at the default level only; at
			// GOTRACEBACK=system it shows every frame
			// (runtime.gcenable.gowrap1).
			continue
		case show == showDefault && !showFrame(loc.Function, len(out) == 0):
			continue
		case show == showSystem && !strings.Contains(loc.Function, "."):
			continue
		}
		out = append(out, output.Frame{PC: f.PC, Function: loc.Function, Offset: loc.Offset, Module: loc.Module,
			File: loc.File, Line: loc.Line, Inlined: loc.Inlined, Method: f.Method.String()})
	}
	return out, locs[len(locs)-1].Function
}

// creator resolves g.gopc as Go's printcreatedby does: the physical
// function holding the go statement and the innermost position of the
// call; nothing for goroutine 1 or when Go would hide the function at
// level show.
func creator(g *goroutines.Goroutine, tg *target.Target, sym *symbolize.Symbolizer, show int) *Creator {
	if g.GoPC == 0 || g.ID == 1 {
		return nil
	}
	locs := sym.Frame(tg.Space.Find(g.GoPC-1), g.GoPC, false)
	phys := locs[len(locs)-1]
	if phys.Function == "" || show == showDefault && (phys.GoWrapper || !showFrame(phys.Function, false)) {
		return nil
	}
	return &Creator{Function: phys.Function, File: locs[0].File, Line: locs[0].Line, Goroutine: g.ParentID, Offset: phys.Offset}
}

// showFrame is the runtime's showfuncinfo at the default GOTRACEBACK:
// functions of package runtime are hidden unless exported (and
// runtime.gopanic is shown past the first frame), as are names without a
// package.
func showFrame(name string, first bool) bool {
	if name == "runtime.gopanic" && !first {
		return true
	}
	dot := false
	for i := 0; i < len(name); i++ {
		if name[i] == '.' {
			dot = true
			break
		}
	}
	if !dot {
		return false
	}
	const rt = "runtime."
	if len(name) < len(rt) || name[:len(rt)] != rt {
		return true
	}
	return isExportedRuntime(name)
}

// isExportedRuntime reports an exported runtime function or an exported
// method of an exported runtime type.
func isExportedRuntime(name string) bool {
	name = name[len("runtime."):]
	rcvr := ""
	i := len(name) - 1
	for i >= 0 && name[i] != '.' {
		i--
	}
	if i >= 0 {
		rcvr, name = name[:i], name[i+1:]
		if len(rcvr) >= 3 && rcvr[0] == '(' && rcvr[1] == '*' && rcvr[len(rcvr)-1] == ')' {
			rcvr = rcvr[2 : len(rcvr)-1]
		}
	}
	upper := func(s string) bool { return len(s) > 0 && s[0] >= 'A' && s[0] <= 'Z' }
	return upper(name) && (rcvr == "" || upper(rcvr))
}

// cFrames adds the C frames of a goroutine in a cgo call: those the
// thread's walk finds below runtime.asmcgocall, through which Go switched
// to the system stack to call C. A goroutine in a plain system call has
// none (its thread is in Go code on the goroutine's stack).
func cFrames(out []output.Frame, u *unwind.Unwinder, st *unwind.Stack, th *target.Context, tg *target.Target, sym *symbolize.Symbolizer) []output.Frame {
	u.WalkInto(st, th.Regs, tg.Memory(th), tg.Space)
	for j := range st.Frames {
		f := &st.Frames[j]
		locs := sym.Frame(f.Map, f.PC, f.Exact)
		switch locs[len(locs)-1].Function {
		case "runtime.asmcgocall", "runtime.asmcgocall.abi0":
			for k := range st.Frames[:j] {
				out = appendFrames(out, sym, &st.Frames[k], showAll)
			}
			return out
		}
	}
	return out
}
