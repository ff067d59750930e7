package luajit

import (
	"debug/elf"
	"encoding/binary"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fuzzcorpus"
	"github.com/rewindstack/rewind/target"
)

// FuzzLuaFrames: a Lua stack in hostile memory (frame links, prototypes,
// bytecode, strings all garbage) is walked to an end, without panicking.
func FuzzLuaFrames(f *testing.F) {
	seed := make([]byte, 512)
	le := binary.LittleEndian
	le.PutUint64(seed[16:], 0x10000+0x100) // L->base
	le.PutUint32(seed[36:], 0x10000+0x40)  // L->stack
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		l := Layout{LBase: 16, LStack: 36, protoSize: 64, pSizebc: 8, pK: 16, pChunk: 40,
			pFirst: 44, pNumline: 48, pLineinfo: 52, pUvinfo: 56, pVarinfo: 60, fnPC: 16}
		w := NewWalker(&l, &target.Snapshot{Regions: []target.Region{{Addr: 0x10000, Data: data}}})
		if fs := w.Frames(0x10000); len(fs) > 64 {
			t.Errorf("%d frames", len(fs))
		}
	})
}

// TestStack: a lua_State's frames become one activation's interpreted
// frames, placed before LuaJIT's C entry, as fiber.info() names them.
func TestStack(t *testing.T) {
	st := Stack([]Frame{{Name: "handler", Source: "@app.lua", Line: 3}, {Source: "=[C]", Line: -1}})
	if st.Entry != Entry || len(st.Frames) != 2 {
		t.Fatalf("stack %+v", st)
	}
	if f := st.Frames[0]; f.Function != "handler" || f.File != "@app.lua" || f.Line != 3 || f.Method != "lua" || f.Activation != 0 || f.ParenLocation {
		t.Errorf("frame %+v", f)
	}
}

// hostileBase is where FuzzLuaStates's memory lies.
const hostileBase = 0x10000

// gc64State lays out a GC64 lua_State at hostileBase (its global_State,
// a two-slot Lua stack of one C function's frame, and one C frame of
// the VM that points back to it), for the fuzzer to damage.
func gc64State() []byte {
	le := binary.LittleEndian
	m := make([]byte, 0x1000)
	const L, G, stack, cf, fn = hostileBase, hostileBase + 0x200, hostileBase + 0x400, hostileBase + 0x800, hostileBase + 0xa00
	l := &LayoutGC64
	m[l.objGct] = gctThread
	le.PutUint64(m[l.lGlref:], G)
	le.PutUint64(m[l.LStack:], stack)
	le.PutUint64(m[l.LBase:], stack+8*3)
	le.PutUint64(m[l.lTop:], stack+8*4)
	le.PutUint64(m[l.lCframe:], cf)
	le.PutUint64(m[G-L+l.gRoot:], L)
	le.PutUint64(m[G-L+l.gMainth:], L)
	// Slot 0 is the dummy frame, 1-2 the C function's link (FRAME_C, a
	// delta of two slots), 3 its first argument.
	le.PutUint64(m[stack-L+8*1:], fn|uint64(0x1fff7)<<47)
	le.PutUint64(m[stack-L+8*2:], 8*2+frameC)
	m[fn-L+l.fnFFID] = 1
	le.PutUint64(m[cf-L+l.cfL:], L)
	return m
}

// FuzzLuaStates: the search and the walks over hostile memory (a GC64
// and a 32-bit-reference state, garbage anywhere) end, within their
// bounds, without panicking.
func FuzzLuaStates(f *testing.F) {
	f.Add(gc64State(), true)
	f.Add(gc64State(), false)
	f.Fuzz(func(t *testing.T, data []byte, gc64 bool) {
		l := Layout32
		if gc64 {
			l = LayoutGC64
		}
		mem := &target.Snapshot{Regions: []target.Region{{Addr: hostileBase, Data: data}}}
		w := NewWalker(&l, newPageCache(mem))
		if fs, _ := w.Walk(hostileBase); len(fs) > maxFrames {
			t.Errorf("%d frames", len(fs))
		}
		cfs := ScanStack(mem, &l, hostileBase, hostileBase+uint64(len(data)))
		for _, cf := range cfs {
			if len(Chain(w, cf.L)) > 256 {
				t.Error("chain past its bound")
			}
			if g, ok := Global(w, cf.L); ok {
				Threads(w, g)
			}
		}
		threadStack(w, w, threadVM{frames: cfs, sp: hostileBase, base: hostileBase + 0x418, pc: hostileBase + 0x900})
	})
}

// TestGC64State: the hand-made GC64 state is found on its "stack" and
// walked: one C function, the coroutine itself in the list.
func TestGC64State(t *testing.T) {
	data := gc64State()
	mem := &target.Snapshot{Regions: []target.Region{{Addr: hostileBase, Data: data}}}
	cfs := ScanStack(mem, &LayoutGC64, hostileBase, hostileBase+uint64(len(data)))
	if len(cfs) != 1 || cfs[0].L != hostileBase || cfs[0].Addr != hostileBase+0x800 {
		t.Fatalf("C frames %+v", cfs)
	}
	w := NewWalker(&LayoutGC64, mem)
	fs, end := w.Walk(hostileBase)
	if len(fs) != 1 || fs[0].FFID != 1 || end != "" {
		t.Errorf("frames %+v, end %q", fs, end)
	}
	g, ok := Global(w, hostileBase)
	ths, end := Threads(w, g)
	if !ok || len(ths) != 1 || !ths[0].Main || end != "" {
		t.Errorf("global %v %v, threads %+v, end %q", g, ok, ths, end)
	}
	// A list that loops ends at its bound, with a reason.
	binary.LittleEndian.PutUint64(data[0:], hostileBase)
	if _, end := Threads(w, g); end == "" {
		t.Error("a looping object list ended without a reason")
	}
}

// TestWriteLuaStatesCorpus writes FuzzLuaStates's committed seeds (run
// with REWIND_WRITE_CORPUS=1): the hand-made GC64 state, read with each
// layout, and with its object list looping.
func TestWriteLuaStatesCorpus(t *testing.T) {
	write := fuzzcorpus.Regenerate(t, "FuzzLuaStates")
	write("gc64", gc64State(), true)
	write("gc64-as-32", gc64State(), false)
	loop := gc64State()
	binary.LittleEndian.PutUint64(loop[0:], hostileBase)
	write("gc64-loop", loop, true)
}

// TestLayout32MatchesTarantool: the hard-coded 32-bit-reference layout
// is what Tarantool's DWARF types say (Debian's Tarantool builds LuaJIT
// 2.1 that way), but for what its fork of LuaJIT changed: GCstr's
// header, 4 bytes shorter (no string id), and global_State, whose GC
// state keeps statistics of its own. Those the DWARF gives.
func TestLayout32MatchesTarantool(t *testing.T) {
	const exe = "/usr/bin/tarantool"
	f, err := elf.Open(exe)
	if err != nil {
		t.Skip("no Tarantool: ", err)
	}
	defer f.Close()
	d, err := f.DWARF()
	if err != nil {
		t.Skip("Tarantool without DWARF: ", err)
	}
	got, ok := LayoutFrom(d)
	if !ok {
		t.Fatal("no LuaJIT layout in Tarantool's DWARF")
	}
	want := Layout32
	if got.strLen != 12 || got.strData != 16 {
		t.Errorf("Tarantool's GCstr: len at %d, data at %d; want 12, 16", got.strLen, got.strData)
	}
	if got.gRoot != 80 || got.gMainth != 160 {
		t.Errorf("Tarantool's global_State: gc.root at %d, mainthref at %d; want 80, 160", got.gRoot, got.gMainth)
	}
	if got.gVMState != 120 || got.gCurL != 280 || got.gJitBase != 284 {
		t.Errorf("Tarantool's global_State: vmstate at %d, cur_L at %d, jit_base at %d; want 120, 280, 284", got.gVMState, got.gCurL, got.gJitBase)
	}
	got.strLen, got.strData, got.gRoot, got.gMainth = want.strLen, want.strData, want.gRoot, want.gMainth
	got.gVMState, got.gCurL, got.gJitBase = want.gVMState, want.gCurL, want.gJitBase
	if got != want {
		t.Errorf("Tarantool's DWARF layout\n%+v\nhard-coded\n%+v", got, want)
	}
}
