package luajit

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/rewindstack/rewind/target"
)

// Read finds the lua_States of tg's threads and their suspended
// coroutines, through the first of f's layouts that finds any (the
// object's DWARF layout, when it has one of the same kind), and gives
// the threads their Lua frames and, when fibers is set, the coroutines
// contexts of their own (fibers of kind "lua", after the target's
// contexts; otherwise warn counts them); warn says what was cut short,
// in one line each.
func Read(tg *target.Target, f *Found, fibers bool, warn func(string)) {
	mem := newPageCache(tg.Mem)
	for _, l := range f.Layouts() {
		found := scanThreads(tg, &l)
		if len(found) == 0 {
			continue
		}
		if dl, ok := f.DWARF(); ok && dl.GC64 == l.GC64 {
			l = dl
		}
		attach(tg, mem, &l, found, fibers, warn)
		return
	}
}

// threadVM is what the stack search found on one thread.
type threadVM struct {
	ctx    int // index in tg.Contexts
	frames []CFrame
}

// scanThreads searches each thread's stack, read as copied (not through
// the page cache: the copy is of the pause's instant).
func scanThreads(tg *target.Target, l *Layout) []threadVM {
	var out []threadVM
	for i := range tg.Contexts {
		c := &tg.Contexts[i]
		if c.Kind != target.KindThread || c.Err != nil {
			continue
		}
		sp, ok := c.Regs.SP()
		if !ok {
			continue
		}
		// A core's space has no mapping for anonymous memory: its
		// stack is read up to the first unreadable page instead.
		end := sp + maxScan
		if m := tg.Space.Find(sp); m != nil {
			end = m.End
		}
		if fs := ScanStack(tg.Memory(c), l, sp, end); len(fs) > 0 {
			out = append(out, threadVM{ctx: i, frames: fs})
		}
	}
	return out
}

// attach gives each thread found its Lua frames and lists the
// coroutines of every global_State found.
func attach(tg *target.Target, mem target.Memory, l *Layout, found []threadVM, fibers bool, warn func(string)) {
	w := NewWalker(l, mem)
	native := NewWalker(l, tg.Mem) // the C frames' chains, on the copied stacks
	globals := map[uint64]int{}    // global_State -> the thread it was found on
	var order []uint64
	for _, th := range found {
		c := &tg.Contexts[th.ctx]
		st, notes := threadStack(w, native, th.frames)
		c.SetInterp(st)
		for _, n := range notes {
			warnf(warn, "thread %d: %s", c.TID, n)
		}
		for _, cf := range th.frames {
			if g, ok := Global(w, cf.L); ok {
				if _, seen := globals[g]; !seen {
					globals[g] = c.TID
					order = append(order, g)
				}
			}
		}
	}
	for _, g := range order {
		ths, end := Threads(w, g)
		if fibers {
			tg.Contexts = slices.Grow(tg.Contexts, len(ths))
		}
		if end != "" {
			warnf(warn, "the coroutines' list was cut short (%s): some coroutines are missing", end)
		}
		unlisted := 0
		for _, t := range ths {
			if t.Main || t.CFrame != 0 || (t.Status != 1 && !t.NeverRan) {
				continue // running on a thread (shown there), finished or dead
			}
			if !fibers {
				unlisted++
				continue
			}
			fc := target.Context{Kind: target.KindFiber, Runtime: Method, TID: globals[g], Name: "coroutine",
				Saved: t.L, NeverRan: t.NeverRan}
			fs, end := w.Walk(t.L)
			if end != "" {
				warnf(warn, "coroutine %#x: Lua frames cut short: %s", t.L, end)
			}
			if len(fs) > 0 {
				st := TracebackStack(fs)
				for i := range st.Frames {
					st.Frames[i].Activation = 0
				}
				fc.SetInterp(st)
			}
			tg.Contexts = append(tg.Contexts, fc)
		}
		if unlisted > 0 {
			warnf(warn, "thread %d: %d suspended coroutines not listed (--fibers lists them)", globals[g], unlisted)
		}
	}
}

func warnf(warn func(string), format string, args ...any) {
	if warn != nil {
		warn("Lua frames: " + fmt.Sprintf(format, args...))
	}
}

// threadStack is one thread's Lua frames: those of each lua_State that
// runs on it, ordered by the native C frame of the VM each activation
// runs in (innermost first) and anchored to it, so that the splicer
// puts them above the right one even where the VM has no symbols.
func threadStack(w, native *Walker, cfs []CFrame) (target.InterpStack, []string) {
	sortCFrames(cfs)
	rank := map[uint64]int{}
	for i, cf := range cfs {
		rank[cf.Addr] = i
	}
	type placed struct {
		rank, seq int
		f         target.InterpFrame
	}
	var all []placed
	var notes []string
	seen := map[uint64]bool{}
	for _, cf := range cfs {
		if seen[cf.L] {
			continue
		}
		seen[cf.L] = true
		chain := Chain(native, cf.L)
		fs, end := w.Walk(cf.L)
		if end != "" {
			notes = append(notes, fmt.Sprintf("lua_State %#x: Lua frames cut short: %s", cf.L, end))
		}
		st := TracebackStack(fs)
		for j, f := range st.Frames {
			r := len(cfs) // an activation without its C frame: outermost
			if a := fs[j].Activation; a < len(chain) {
				if rk, ok := rank[chain[a]]; ok {
					r = rk
					f.Anchor = chain[a] + w.l.cfL
				}
			}
			all = append(all, placed{rank: r, seq: len(all), f: f})
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].rank < all[j].rank })
	out := target.InterpStack{Entry: Entry}
	act, last := -1, -1
	for _, p := range all {
		if p.rank != last {
			act, last = act+1, p.rank
		}
		p.f.Activation = act
		out.Frames = append(out.Frames, p.f)
	}
	return out, notes
}

// TracebackStack is a lua_State's frames as debug.traceback names them:
// a function by the name its caller used ("lua_c"), a main chunk as
// "main chunk", another function without a name as "<file:line>" of its
// definition; the file as the chunk's short name ("app.lua" for
// "@app.lua"), "[C]" for a C function, whose line is 0 (unknown).
func TracebackStack(fs []Frame) target.InterpStack {
	out := make([]target.InterpFrame, 0, len(fs))
	for _, f := range fs {
		src := ShortSource(f.Source)
		name := f.Name
		switch {
		case name != "":
		case f.FFID > 1:
			name = "[builtin#" + strconv.Itoa(f.FFID) + "]"
		case f.FFID == 1:
		case f.FirstLine == 0:
			name = "main chunk"
		default:
			name = "<" + src + ":" + strconv.Itoa(f.FirstLine) + ">"
		}
		if f.FFID != 0 {
			src = "[C]"
		}
		out = append(out, target.InterpFrame{Function: name, File: src, Line: max(f.Line, 0), Method: Method,
			ParenLocation: true, Activation: f.Activation})
	}
	return target.InterpStack{Entry: Entry, Frames: out}
}

// idSize is LUA_IDSIZE, the size of lua_Debug's short_src.
const idSize = 60

// ShortSource is lj_debug_shortname: a chunk name as a traceback shows
// it ("@app.lua" -> "app.lua", "=stdin" -> "stdin", a string chunk as
// [string "..."]).
func ShortSource(src string) string {
	switch {
	case strings.HasPrefix(src, "="):
		s := src[1:]
		if len(s) > idSize-1 {
			s = s[:idSize-1]
		}
		return s
	case strings.HasPrefix(src, "@"):
		s := src[1:]
		if len(s) > idSize-1 {
			s = "..." + s[len(s)-(idSize-4):]
		}
		return s
	}
	line := src
	if i := strings.IndexAny(line, "\r\n"); i >= 0 {
		line = line[:i]
	}
	room := idSize - len(`[string "..."]`) - 1
	if len(line) > room || len(line) < len(src) {
		if len(line) > room {
			line = line[:room]
		}
		return `[string "` + line + `..."]`
	}
	return `[string "` + line + `"]`
}
