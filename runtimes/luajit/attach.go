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
//
// copies, when given, are what a live process's pause copied of its
// lua_States and Lua stacks: read in place of the process.
func Read(tg *target.Target, f *Found, fibers bool, warn func(string), copies ...target.Region) {
	var mem target.Memory = newPageCache(tg.Mem)
	if len(copies) > 0 {
		mem = &target.Snapshot{Regions: copies, Next: mem}
	}
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
	// sp, base and pc are the thread's stack pointer and the
	// interpreter's BASE (rdx) and PC (rbx) registers: those of the
	// innermost activation when the thread runs Lua code (sp at its C
	// frame), not a C function called from Lua.
	sp, base, pc uint64
	// anonPC says the thread's PC is in no file's code: JIT-compiled
	// code (LuaJIT's traces are in anonymous memory).
	anonPC bool
}

// jitFrame is how far below its C frame a JIT trace moves the stack
// pointer (CFRAME_SIZE_JIT - CFRAME_SIZE, x86-64 System V).
const jitFrame = 16

// amd64's DWARF numbers of the interpreter's BASE and PC (vm_x64.dasc,
// System V: rdx, rbx).
const (
	regBase = 1
	regPC   = 3
)

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
			th := threadVM{ctx: i, frames: fs, sp: sp}
			th.base, _ = c.Regs.Get(regBase)
			th.pc, _ = c.Regs.Get(regPC)
			pc, _ := c.Regs.PC()
			m := tg.Space.Find(pc)
			th.anonPC = m == nil || m.Path == "" // a core's space has no anonymous mappings
			out = append(out, th)
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
		st, notes := threadStack(w, native, th)
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
func threadStack(w, native *Walker, th threadVM) (target.InterpStack, []string) {
	cfs := th.frames
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
		var fs []Frame
		var end string
		if cf == cfs[0] && (th.sp >= cf.Addr || th.anonPC && th.sp+jitFrame >= cf.Addr) {
			// No C function runs above the innermost C frame of the VM:
			// the thread runs Lua code (the interpreter at the frame's
			// stack pointer, a trace just below), and L->base is stale.
			base, pc, note := w.running(cf.L, th.base, th.pc)
			if note != "" {
				notes = append(notes, note)
			}
			if base == 0 {
				continue
			}
			fs, end = w.WalkFrom(cf.L, base, pc)
		} else {
			fs, end = w.Walk(cf.L)
		}
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

// gctFunc is a function's gct (~LJ_TFUNC).
const gctFunc = 8

// running checks the interpreter's registers of a thread that runs L's
// Lua code: base (rdx) must be a frame's base on L's stack whose link
// holds a Lua function, and pc (rbx) inside that function's bytecode.
// It returns the base and PC to walk from (pc 0: in a JIT trace, which
// keeps no PC in a register), or base 0 and why there is nothing to
// walk; note says what is missing.
func (w *Walker) running(L, base, pc uint64) (uint64, uint64, string) {
	stack, ok1 := w.ref(L + w.l.LStack)
	maxst, ok2 := w.ref(L + w.l.lMaxstack)
	if !ok1 || !ok2 || base&7 != 0 || base < stack+16 || base > maxst {
		return 0, 0, fmt.Sprintf("lua_State %#x runs Lua code, and the interpreter's BASE register is not on its stack: its frames are not shown (L->base is stale)", L)
	}
	fn, _, ok := w.link(base - 8)
	gct, ok2 := w.byte1(fn + w.l.objGct)
	ffid, ok3 := w.byte1(fn + w.l.fnFFID)
	if !ok || !ok2 || !ok3 || gct != gctFunc || ffid != 0 {
		return 0, 0, fmt.Sprintf("lua_State %#x runs Lua code, and the interpreter's BASE register holds no Lua function's frame: its frames are not shown (L->base is stale)", L)
	}
	bc, ok := w.ref(fn + w.l.fnPC)
	sizebc, ok2 := w.u32(bc - w.l.protoSize + w.l.pSizebc)
	if ok && ok2 && pc > bc && pc <= bc+4*sizebc {
		return base, pc, ""
	}
	return base, 0, fmt.Sprintf("lua_State %#x runs code the JIT compiled: its innermost Lua frame's line is unknown (0)", L)
}
