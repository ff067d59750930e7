package luajit

import (
	"debug/dwarf"
)

// Layout holds the structure offsets the walk and the search for
// lua_States need. LuaJIT 2.1 has two: GC64 (8-byte GC references, and
// LJ_FR2's two-slot frame links), the x86-64 default of current
// releases and of Debian's luajit, and 32-bit references (GC objects in
// the low 2 GiB), as Tarantool builds it. The offsets below were taken
// from lj_obj.h and lj_frame.h of LuaJIT 2.1 (the same in its 2022 and
// 2026 sources); a binary with DWARF types has them read from there
// instead (LayoutFrom), and a test compares the two on Tarantool.
type Layout struct {
	// LBase and LStack are the offsets of lua_State's base (a pointer)
	// and stack (a reference): what a copy of a lua_State made ahead of
	// a walk must hold.
	LBase, LStack uint64
	// GC64 is set for 8-byte references and two-slot frame links.
	GC64 bool

	protoSize                                                                 uint64 // sizeof(GCproto)
	pSizebc, pK, pChunk, pFirst, pNumline, pLineinfo, pUvinfo, pVarinfo, fnPC uint64
	fnFFID                                                                    uint64 // GCfunc's ffid (0: a Lua function)
	strLen, strData                                                           uint64 // GCstr's len, and its size (the bytes follow)
	objGct                                                                    uint64 // every GC object's gct byte
	lStatus, lGlref, lTop, lCframe, lMaxstack, lStacksize                     uint64 // lua_State
	gRoot, gMainth                                                            uint64 // global_State: gc.root, mainthref
	gVMState, gCurL, gJitBase                                                 uint64 // global_State: vmstate, cur_L, jit_base (the kernel walk's)
	cfL, cfPC, cfPrev                                                         uint64 // the VM's C frame (x86-64 System V)
}

// LayoutGC64 is LuaJIT 2.1's GC64 layout on x86-64.
var LayoutGC64 = Layout{
	LBase: 32, LStack: 56, GC64: true,
	protoSize: 104, pSizebc: 12, pK: 32, pChunk: 64, pFirst: 72, pNumline: 76, pLineinfo: 80, pUvinfo: 88, pVarinfo: 96,
	fnPC: 32, fnFFID: 10, strLen: 20, strData: 24, objGct: 9,
	lStatus: 11, lGlref: 16, lTop: 40, lCframe: 80, lMaxstack: 48, lStacksize: 88,
	gRoot: 16 + 24, gMainth: 192, gVMState: 184, gCurL: 368, gJitBase: 376,
	cfL: 16, cfPC: 24, cfPrev: 32,
}

// Layout32 is LuaJIT 2.1's layout with 32-bit references on x86-64.
var Layout32 = Layout{
	LBase: 16, LStack: 36,
	protoSize: 64, pSizebc: 8, pK: 16, pChunk: 40, pFirst: 44, pNumline: 48, pLineinfo: 52, pUvinfo: 56, pVarinfo: 60,
	fnPC: 16, fnFFID: 6, strLen: 16, strData: 20, objGct: 5,
	lStatus: 7, lGlref: 8, lTop: 24, lCframe: 48, lMaxstack: 32, lStacksize: 56,
	gRoot: 16 + 16, gMainth: 140, gVMState: 136, gCurL: 296, gJitBase: 300,
	cfL: 24, cfPC: 28, cfPrev: 32,
}

// refSize is the size of a GCRef or MRef.
func (l *Layout) refSize() uint64 {
	if l.GC64 {
		return 8
	}
	return 4
}

// LayoutFrom reads the offsets from a binary's DWARF; ok is false when a
// type the walk needs is missing. What the DWARF does not say (the VM's
// C frame, which is assembly) is the hard-coded layout's.
func LayoutFrom(d *dwarf.Data) (Layout, bool) {
	sts := StructTypes(d, "lua_State", "GCproto", "GCfuncL", "GCstr", "global_State")
	ls, pt, fl := sts["lua_State"], sts["GCproto"], sts["GCfuncL"]
	if ls == nil || pt == nil || fl == nil {
		return Layout{}, false
	}
	var stackSize int64
	for _, f := range ls.Field {
		if f.Name == "stack" {
			stackSize = f.Type.Size()
		}
	}
	l := Layout32
	if stackSize == 8 {
		l = LayoutGC64
	} else if stackSize != 4 {
		return Layout{}, false
	}
	ok := true
	set := func(st *dwarf.StructType, dst *uint64, path ...string) {
		if st == nil {
			return // an optional structure: the hard-coded offset stays
		}
		o, found := FieldOffset(st, path...)
		if !found {
			ok = false
			return
		}
		*dst = o
	}
	set(ls, &l.LBase, "base")
	set(ls, &l.LStack, "stack")
	set(ls, &l.lStatus, "status")
	set(ls, &l.lGlref, "glref")
	set(ls, &l.lTop, "top")
	set(ls, &l.lCframe, "cframe")
	set(ls, &l.lMaxstack, "maxstack")
	set(ls, &l.lStacksize, "stacksize")
	set(ls, &l.objGct, "gct")
	for _, p := range []struct {
		dst  *uint64
		name string
	}{{&l.pSizebc, "sizebc"}, {&l.pK, "k"}, {&l.pChunk, "chunkname"}, {&l.pFirst, "firstline"},
		{&l.pNumline, "numline"}, {&l.pLineinfo, "lineinfo"}, {&l.pUvinfo, "uvinfo"}, {&l.pVarinfo, "varinfo"}} {
		set(pt, p.dst, p.name)
	}
	set(fl, &l.fnPC, "pc")
	set(fl, &l.fnFFID, "ffid")
	l.protoSize = uint64(pt.ByteSize)
	if gs := sts["GCstr"]; gs != nil {
		set(gs, &l.strLen, "len")
		l.strData = uint64(gs.ByteSize)
	}
	if g := sts["global_State"]; g != nil {
		set(g, &l.gRoot, "gc", "root")
		set(g, &l.gMainth, "mainthref")
		set(g, &l.gVMState, "vmstate")
		set(g, &l.gCurL, "cur_L")
		set(g, &l.gJitBase, "jit_base")
	}
	return l, ok
}

// StructType finds the definition of struct name among the compile
// units' top-level types: for LayoutFrom, and for the programs that
// embed a lua_State in their own structures.
func StructType(d *dwarf.Data, name string) *dwarf.StructType {
	return StructTypes(d, name)[name]
}

// StructTypes finds the definitions of several structs in one pass over
// the DWARF (a large binary's takes a tenth of a second), stopping once
// all are found.
func StructTypes(d *dwarf.Data, names ...string) map[string]*dwarf.StructType {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]*dwarf.StructType{}
	r := d.Reader()
	for len(out) < len(want) {
		e, err := r.Next()
		if err != nil || e == nil {
			break
		}
		if e.Tag == dwarf.TagCompileUnit {
			continue
		}
		if e.Tag == dwarf.TagStructType && e.Val(dwarf.AttrDeclaration) == nil {
			if n, _ := e.Val(dwarf.AttrName).(string); want[n] && out[n] == nil {
				if t, err := d.Type(e.Offset); err == nil {
					if st, ok := t.(*dwarf.StructType); ok && !st.Incomplete {
						out[n] = st
					}
				}
			}
		}
		if e.Children {
			r.SkipChildren()
		}
	}
	return out
}

// FieldOffset is the byte offset of a nested member, through typedefs.
func FieldOffset(st *dwarf.StructType, path ...string) (uint64, bool) {
	var off uint64
	t := dwarf.Type(st)
	for _, name := range path {
		for {
			if td, ok := t.(*dwarf.TypedefType); ok {
				t = td.Type
				continue
			}
			break
		}
		s, ok := t.(*dwarf.StructType)
		if !ok {
			return 0, false
		}
		found := false
		for _, f := range s.Field {
			if f.Name == name {
				off += uint64(f.ByteOffset)
				t = f.Type
				found = true
				break
			}
		}
		if !found {
			return 0, false
		}
	}
	return off, true
}
