package luajit

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/rewindstack/rewind/internal/fsafe"
	"github.com/rewindstack/rewind/target"
)

// Found is LuaJIT found in a process or core: the object that exports
// its API.
type Found struct {
	// Path is where the object (the executable, libluajit-5.1.so) can
	// be opened.
	Path string
	// Mapping is a mapping of it in the target.
	Mapping *target.Mapping

	once  sync.Once
	dwarf Layout
	ok    bool
}

// Layouts are the layouts the stack search tries, in order: LuaJIT
// 2.1's two (the search tells them apart).
func (f *Found) Layouts() []Layout { return []Layout{LayoutGC64, Layout32} }

// DWARF is the layout the object's DWARF types give (read once, and
// only once LuaJIT is found running: a large binary's DWARF takes a
// tenth of a second), ok false without them.
func (f *Found) DWARF() (Layout, bool) {
	f.once.Do(func() {
		defer func() {
			if r := recover(); r != nil { // debug/dwarf on hostile files
				f.ok = false
			}
		}()
		fh, _, err := fsafe.Open(f.Path)
		if err != nil {
			return
		}
		defer fh.Close()
		ef, err := elf.NewFile(fh)
		if err != nil {
			return
		}
		if d, err := ef.DWARF(); err == nil {
			f.dwarf, f.ok = LayoutFrom(d)
		}
	})
	return f.dwarf, f.ok
}

// Find looks for LuaJIT among a process's or core's mappings: the
// executable, and any object whose name says luajit
// (libluajit-5.1.so), that exports luaJIT_setmode. It returns nil when
// none is. file gives the path an object can be opened at ("" when it
// cannot).
func Find(maps []target.Mapping, file func(*target.Mapping) string) (*Found, error) {
	seen := map[string]bool{}
	exe := ""
	var firstErr error
	for i := range maps {
		m := &maps[i]
		if m.Path == "" || m.Path[0] != '/' {
			continue
		}
		if exe == "" {
			exe = m.Path
		}
		if seen[m.Path] || (m.Path != exe && !strings.Contains(filepath.Base(m.Path), "luajit")) {
			continue
		}
		seen[m.Path] = true
		path := file(m)
		if path == "" {
			continue
		}
		ok, err := exportsLuaJIT(path)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		if ok {
			return &Found{Path: path, Mapping: m}, nil
		}
	}
	return nil, firstErr
}

// exportsLuaJIT reports whether the object at path defines
// luaJIT_setmode among its dynamic symbols.
func exportsLuaJIT(path string) (found bool, err error) {
	fh, _, err := fsafe.Open(path)
	if err != nil {
		return false, nil // (not readable: not this runtime's to say)
	}
	defer fh.Close()
	defer func() {
		if r := recover(); r != nil { // debug/elf on hostile files
			found, err = false, fmt.Errorf("%s: malformed ELF: %v", path, r)
		}
	}()
	ef, err := elf.NewFile(fh)
	if err != nil {
		return false, nil
	}
	syms, _ := ef.DynamicSymbols()
	for _, s := range syms {
		if s.Name == "luaJIT_setmode" && s.Section != elf.SHN_UNDEF {
			return true, nil
		}
	}
	return false, nil
}

// maxScan bounds the native stack searched for the VM's C frames, from
// the stack pointer up.
const maxScan = 1 << 20

// thTLJThread is a lua_State's gct (~LJ_TTHREAD).
const gctThread = 6

// CFrame is one activation of the VM found on a native stack: the VM's
// C frame (L->cframe points to it; lua_pcall, lua_call, lua_cpcall and
// a coroutine's resume make one) and the lua_State it runs.
type CFrame struct {
	Addr uint64 // the frame's stack pointer
	L    uint64
}

// ScanStack finds the VM's C frames on the native stack [sp, end) in
// mem, innermost first. A word is taken as a frame's saved L only when
// the lua_State it points to is one (its type byte) whose chain of C
// frames (L->cframe, then each frame's saved previous one) reaches that
// frame: an old value left on the stack is not.
func ScanStack(mem target.Memory, l *Layout, sp, end uint64) []CFrame {
	lo := sp &^ 15
	if end <= lo {
		return nil
	}
	end = min(end, lo+maxScan)
	data := make([]byte, end-lo)
	if mem.ReadMemory(lo, data) != nil {
		// A partly readable stack: as much as reads from its start.
		n := 0
		for step := 4096 - int(lo&4095); n+step <= len(data); step = 4096 {
			if mem.ReadMemory(lo+uint64(n), data[n:n+step]) != nil {
				break
			}
			n += step
		}
		data = data[:n]
	}
	le := binary.LittleEndian
	word := func(addr uint64) (uint64, bool) {
		if addr < lo || addr+8 > lo+uint64(len(data)) {
			return 0, false
		}
		return le.Uint64(data[addr-lo:]), true
	}
	w := NewWalker(l, mem)
	var out []CFrame
	checked := map[uint64]map[uint64]bool{} // L -> its chain of C frames
	for cf := lo; cf+l.cfPrev+8 <= lo+uint64(len(data)); cf += 16 {
		L, _ := word(cf + l.cfL)
		if !l.GC64 {
			L &= 0xffffffff
		}
		if L == 0 || L&7 != 0 || L == cf {
			continue
		}
		prev, _ := word(cf + l.cfPrev)
		if raw := prev &^ 3; raw != 0 && (raw <= cf || raw >= end) {
			continue
		}
		chain, ok := checked[L]
		if !ok {
			chain = cframeChain(w, L, lo, end)
			checked[L] = chain
		}
		if chain[cf] {
			out = append(out, CFrame{Addr: cf, L: L})
		}
	}
	return out
}

// cframeChain is the set of L's C frames within [lo, end), empty when L
// is not a lua_State.
func cframeChain(w *Walker, L, lo, end uint64) map[uint64]bool {
	var gct [1]byte
	if w.mem.ReadMemory(L+w.l.objGct, gct[:]) != nil || gct[0] != gctThread {
		return nil
	}
	cf, ok := w.u64(L + w.l.lCframe)
	out := map[uint64]bool{}
	for i := 0; ok && i < 256; i++ {
		cf &^= 3
		if cf < lo || cf >= end || out[cf] {
			break
		}
		out[cf] = true
		cf, ok = w.u64(cf + w.l.cfPrev)
	}
	return out
}

// Chain is L's C frames, innermost first (at most 256), read from mem.
func Chain(w *Walker, L uint64) []uint64 {
	cf, ok := w.u64(L + w.l.lCframe)
	var out []uint64
	for ok && len(out) < 256 {
		cf &^= 3
		if cf == 0 || (len(out) > 0 && cf <= out[len(out)-1]) {
			break
		}
		out = append(out, cf)
		cf, ok = w.u64(cf + w.l.cfPrev)
	}
	return out
}

// Global returns L's global_State, and whether it is one: its main
// thread is a lua_State of the same global_State.
func Global(w *Walker, L uint64) (uint64, bool) {
	g, ok := w.ref(L + w.l.lGlref)
	if !ok || g == 0 {
		return 0, false
	}
	main, ok := w.ref(g + w.l.gMainth)
	if !ok || main == 0 {
		return 0, false
	}
	var gct [1]byte
	if w.mem.ReadMemory(main+w.l.objGct, gct[:]) != nil || gct[0] != gctThread {
		return 0, false
	}
	g2, ok := w.ref(main + w.l.lGlref)
	return g, ok && g2 == g
}

// maxObjects bounds the walk of a global_State's list of GC objects.
const maxObjects = 1 << 21

// Thread is a lua_State found in a global_State's objects.
type Thread struct {
	L      uint64
	Status int    // 0 running, not started or finished; 1 suspended (LUA_YIELD); more: dead by an error
	CFrame uint64 // L->cframe: not 0 while C frames of the VM run it
	// NeverRan is a coroutine made and not resumed yet (its function
	// waits on its stack).
	NeverRan bool
	// Main is the global_State's main thread.
	Main bool
}

// Threads lists the lua_States among g's GC objects (every coroutine
// and the main thread), walking the list from g->gc.root; end says why
// the walk stopped short ("" when it reached the list's end).
func Threads(w *Walker, g uint64) (out []Thread, end string) {
	main, _ := w.ref(g + w.l.gMainth)
	o, ok := w.ref(g + w.l.gRoot)
	buf := make([]byte, w.l.objGct+1)
	// A loop in damaged memory is seen by Brent's method: the object
	// kept at each power of two comes round again.
	var mark uint64
	for n := 0; ok && o != 0; n++ {
		if n == maxObjects {
			return out, fmt.Sprintf("more than %d GC objects", maxObjects)
		}
		if o == mark {
			return out, fmt.Sprintf("the list of GC objects loops at %#x", o)
		}
		if n&(n-1) == 0 {
			mark = o
		}
		if w.mem.ReadMemory(o, buf) != nil {
			return out, fmt.Sprintf("GC object %#x is unreadable", o)
		}
		next := binary.LittleEndian.Uint64(buf[:8])
		if !w.l.GC64 {
			next &= 0xffffffff
		}
		if buf[w.l.objGct] == gctThread {
			out = append(out, w.thread(o, main))
		}
		o = next
	}
	if !ok {
		return out, "global_State is unreadable"
	}
	return out, ""
}

func (w *Walker) thread(L, main uint64) Thread {
	t := Thread{L: L, Main: L == main}
	var st [1]byte
	if w.mem.ReadMemory(L+w.l.lStatus, st[:]) == nil {
		t.Status = int(st[0])
	}
	t.CFrame, _ = w.u64(L + w.l.lCframe)
	base, ok1 := w.u64(L + w.l.LBase)
	top, ok2 := w.u64(L + w.l.lTop)
	t.NeverRan = t.Status == 0 && t.CFrame == 0 && ok1 && ok2 && top > base && !t.Main
	return t
}

// sortCFrames orders frames innermost first.
func sortCFrames(cs []CFrame) {
	sort.Slice(cs, func(i, j int) bool { return cs[i].Addr < cs[j].Addr })
}
