// Package luajit reads the Lua frames of a LuaJIT 2.1 lua_State from
// outside the process. A lua_State's Lua stack holds, below each
// frame's base, a frame link: the function (a 32-bit GC reference) and
// either the return PC into the caller's bytecode (a Lua frame) or a size
// and type. Walking the links from L->base down to L->stack gives the Lua
// frames, innermost first, as lua_getstack does; a Lua function's current
// line comes from the return PC its callee saved, its name (as
// lua_getinfo "n" gives it) from the instruction that loaded the called
// function into the caller's call slot: a local variable, a global
// (GGET), a field (TGETS), an upvalue (UGET). This is LuaJIT 2.1 with
// 32-bit references (not GC64), as Debian's Tarantool 2.6 builds it;
// structure offsets come from the binary's DWARF types, and a GC64 build
// (16-byte frame links) gets no Lua frames.
//
// A program that embeds LuaJIT composes this reader: it finds its
// lua_States (Tarantool's fibers keep one each, package fibers) and
// hands them to a Walker; Stack turns the frames into the runtime's
// target.InterpStack, spliced above LuaJIT's entry (Entry).
package luajit

import (
	"debug/dwarf"
	"encoding/binary"
	"strings"

	"github.com/rewindstack/rewind/target"
)

// Entry is the native function the interpreter enters Lua from C by:
// a context's Lua frames go before its frame.
const Entry = "lj_BC_FUNCC"

// Method is the method and runtime name of a Lua frame ("lua").
const Method = "lua"

// Frame is one Lua frame as fiber.info() shows it.
type Frame struct {
	// Name is the function's name, "" when lua_getinfo would have none.
	Name string
	// Source is the chunk name ("@app.lua"), "=[C]" for a C function.
	Source string
	// Line is the current line, -1 for a C function.
	Line int
}

// Stack is a lua_State's frames (innermost first) as the splicer takes
// them: all of one activation, before the innermost Entry frame.
func Stack(fs []Frame) target.InterpStack {
	out := make([]target.InterpFrame, 0, len(fs))
	for _, f := range fs {
		out = append(out, target.InterpFrame{Function: f.Name, File: f.Source, Line: f.Line, Method: Method})
	}
	return target.InterpStack{Entry: Entry, Frames: out}
}

// Layout holds the structure offsets the walk needs.
type Layout struct {
	// LBase and LStack are the offsets of lua_State's base (a pointer)
	// and stack (a 32-bit reference): what a copy of a lua_State made
	// ahead of a walk must hold.
	LBase, LStack uint64

	protoSize                                                                 uint64 // sizeof(GCproto)
	pSizebc, pK, pChunk, pFirst, pNumline, pLineinfo, pUvinfo, pVarinfo, fnPC uint64
}

// LayoutFrom reads the offsets from a binary's DWARF; ok is false when a
// type is missing or the build is GC64.
func LayoutFrom(d *dwarf.Data) (Layout, bool) {
	var l Layout
	ls, pt, fl := StructType(d, "lua_State"), StructType(d, "GCproto"), StructType(d, "GCfuncL")
	if ls == nil || pt == nil || fl == nil {
		return l, false
	}
	get := func(st *dwarf.StructType, names ...string) []uint64 {
		var out []uint64
		for _, n := range names {
			o, ok := FieldOffset(st, n)
			if !ok {
				return nil
			}
			out = append(out, o)
		}
		return out
	}
	lo := get(ls, "base", "stack")
	po := get(pt, "sizebc", "k", "chunkname", "firstline", "numline", "lineinfo", "uvinfo", "varinfo")
	fo := get(fl, "pc")
	if lo == nil || po == nil || fo == nil {
		return l, false
	}
	// 32-bit references: the stack field is an MRef of 4 bytes.
	for _, f := range ls.Field {
		if f.Name == "stack" && f.Type.Size() != 4 {
			return l, false
		}
	}
	l.LBase, l.LStack = lo[0], lo[1]
	l.protoSize = uint64(pt.ByteSize)
	l.pSizebc, l.pK, l.pChunk, l.pFirst, l.pNumline, l.pLineinfo, l.pUvinfo, l.pVarinfo = po[0], po[1], po[2], po[3], po[4], po[5], po[6], po[7]
	l.fnPC = fo[0]
	return l, true
}

// StructType finds the definition of struct name among the compile
// units' top-level types: for LayoutFrom, and for the programs that
// embed a lua_State in their own structures.
func StructType(d *dwarf.Data, name string) *dwarf.StructType {
	r := d.Reader()
	for {
		e, err := r.Next()
		if err != nil || e == nil {
			return nil
		}
		if e.Tag == dwarf.TagCompileUnit {
			continue
		}
		if e.Tag == dwarf.TagStructType && e.Val(dwarf.AttrDeclaration) == nil {
			if n, _ := e.Val(dwarf.AttrName).(string); n == name {
				if t, err := d.Type(e.Offset); err == nil {
					if st, ok := t.(*dwarf.StructType); ok && !st.Incomplete {
						return st
					}
				}
			}
		}
		if e.Children {
			r.SkipChildren()
		}
	}
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

// LuaJIT 2.1's bytecode: the operand A mode of every opcode, in opcode
// order (lj_bc.h): 'd' writes slot A, 'b' uses slots from A on (a call, a
// return), others neither.
const bcModes = "" +
	"vvvvvvvvvvvv" + // ISLT ISGE ISLE ISGT ISEQV ISNEV ISEQS ISNES ISEQN ISNEN ISEQP ISNEP
	"dd__vv" + // ISTC ISFC IST ISF ISTYPE ISNUM
	"dddd" + // MOV NOT UNM LEN
	"ddddd" + "ddddd" + "ddddd" + "dd" + // arith VN, NV, VV, POW, CAT
	"dddddb" + // KSTR KCDATA KSHORT KNUM KPRI KNIL
	"duuuur" + // UGET USETV USETS USETN USETP UCLO
	"d" + // FNEW
	"dddvdddd" + "vvvbv" + // TNEW TDUP GGET GSET TGETV TGETS TGETB TGETR; TSETV TSETS TSETB TSETM TSETR
	"bbbbbbbb" + // CALLM CALL CALLMT CALLT ITERC ITERN VARG ISNEXT
	"brrr" + // RETM RET RET0 RET1
	"bbbbbbbbrrrr" + // FORI JFORI FORL IFORL JFORL ITERL IITERL JITERL LOOP ILOOP JLOOP JMP
	"rrrrrrrr" // FUNCF IFUNCF JFUNCF FUNCV IFUNCV JFUNCV FUNCC FUNCCW

// Opcode numbers the name search needs (their positions in bcModes).
const (
	bcMOV    = 18
	bcKNIL   = 44
	bcUGET   = 45
	bcGGET   = 54
	bcTGETS  = 57
	bcCALLM  = 65
	bcITERC  = 69
	bcITERN  = 70
	bcFUNCF  = 89
	bcJFUNCV = 94
)

// LuaJIT's frame link types (lj_frame.h): the low three bits of a frame's
// ftsz when it is not a return PC.
const (
	frameTypeP = 7
	frameCont  = 2
	frameVarg  = 3
)

// Walker reads lua_States' frames. What it derives from prototypes
// and bytecode alone, which do not change while the fibers are parked, is
// remembered: thousands of fibers parked in one function cost its
// bytecode's reads (one system call each on a live process) once.
type Walker struct {
	l   *Layout
	mem target.Memory

	places map[[2]uint64]luaPlace // (function, return PC into it) -> its source and line
	names  map[[3]uint64]string   // (prototype, call instruction, slot) -> slotName
}

// NewWalker returns a walker of the lua_States in mem, laid out as l
// says.
func NewWalker(l *Layout, mem target.Memory) *Walker { return &Walker{l: l, mem: mem} }

// luaPlace is a Lua function's chunk and current line.
type luaPlace struct {
	source string
	line   int
}

func (w *Walker) u32(addr uint64) (uint64, bool) {
	var b [4]byte
	if w.mem.ReadMemory(addr, b[:]) != nil {
		return 0, false
	}
	return uint64(binary.LittleEndian.Uint32(b[:])), true
}

// Frames returns L's Lua frames, innermost first (at most 64).
func (w *Walker) Frames(L uint64) []Frame {
	var b [8]byte
	if w.mem.ReadMemory(L+w.l.LBase, b[:]) != nil {
		return nil
	}
	base := binary.LittleEndian.Uint64(b[:])
	bot, ok := w.u32(L + w.l.LStack)
	if !ok || base <= bot {
		return nil
	}
	var out []Frame
	var next uint64 // the frame above (the callee's link), 0 for the innermost
	pseudo := false // the frame is a vararg call's original, not a level
	for frame := base - 8; frame > bot && len(out) < 64; {
		fn, ok1 := w.u32(frame)
		ftsz, ok2 := w.u32(frame + 4)
		if !ok1 || !ok2 {
			break
		}
		if fn != L && !pseudo { // dummy frames of coroutines hold L itself
			out = append(out, w.frame(fn, frame, next))
		}
		// A vararg function runs in a copy of its frame above its
		// arguments, linked (FRAME_VARG) to the frame it was called in,
		// which lj_debug_frame skips.
		pseudo = ftsz&frameTypeP == frameVarg
		next = frame
		if ftsz&3 == 0 { // a Lua frame: ftsz is the return PC
			ins, ok := w.u32(ftsz - 4)
			if !ok {
				break
			}
			frame -= 8 * (1 + (ins>>8)&0xff)
		} else {
			size := uint64(int64(int32(uint32(ftsz)))) &^ 7
			if size == 0 || size > frame {
				break
			}
			frame -= size
		}
	}
	return out
}

// frame describes the function of the frame at frame; next is the frame
// above it (whose link holds this function's current PC), 0 if none.
func (w *Walker) frame(fn, frame, next uint64) Frame {
	var ret uint64 // the return PC into fn, 0 if unknown
	if next != 0 {
		ret, _ = w.linkPC(next)
	}
	key := [2]uint64{fn, ret}
	place, ok := w.places[key]
	if !ok {
		place = w.place(fn, ret)
		if w.places == nil {
			w.places = map[[2]uint64]luaPlace{}
		}
		w.places[key] = place
	}
	return Frame{Source: place.source, Line: place.line, Name: w.funcName(frame)}
}

// place is the chunk and line of function fn when it returns to ret
// (0: unknown).
func (w *Walker) place(fn, ret uint64) luaPlace {
	p := luaPlace{source: "=[C]", line: -1}
	var ffid [1]byte
	if w.mem.ReadMemory(fn+6, ffid[:]) == nil && ffid[0] == 0 { // FF_LUA: a Lua function
		if pcRef, ok := w.u32(fn + w.l.fnPC); ok {
			pt := pcRef - w.l.protoSize
			p.source = w.str(w.gcref(pt + w.l.pChunk))
			p.line = w.line(pt, w.pcOf(pt, ret))
		}
	}
	return p
}

func (w *Walker) gcref(addr uint64) uint64 { v, _ := w.u32(addr); return v }

// str reads a GCstr's contents (at most 256 bytes).
func (w *Walker) str(s uint64) string {
	if s == 0 {
		return ""
	}
	n, ok := w.u32(s + 12)
	if !ok {
		return ""
	}
	b := make([]byte, min(n, 256))
	if w.mem.ReadMemory(s+16, b) != nil {
		return ""
	}
	return string(b)
}

// pcOf is the bytecode position a Lua function with prototype pt is at,
// from the return PC its callee's link holds (ret); -1 when unknown.
func (w *Walker) pcOf(pt, ret uint64) int64 {
	if ret == 0 {
		return -1
	}
	bc := pt + w.l.protoSize
	if ret <= bc {
		return -1
	}
	return int64((ret-bc)/4) - 1
}

// line is lj_debug_line: the line of bytecode position pc.
func (w *Walker) line(pt uint64, pc int64) int {
	if pc < 0 {
		return -1
	}
	sizebc, _ := w.u32(pt + w.l.pSizebc)
	first, _ := w.u32(pt + w.l.pFirst)
	numline, _ := w.u32(pt + w.l.pNumline)
	li, ok := w.u32(pt + w.l.pLineinfo)
	if !ok || li == 0 || uint64(pc) > sizebc {
		return -1
	}
	if uint64(pc) == sizebc {
		return int(first + numline)
	}
	if pc == 0 {
		return int(first)
	}
	pc--
	var b [4]byte
	switch {
	case numline < 256:
		if w.mem.ReadMemory(li+uint64(pc), b[:1]) != nil {
			return -1
		}
		return int(first) + int(b[0])
	case numline < 65536:
		if w.mem.ReadMemory(li+2*uint64(pc), b[:2]) != nil {
			return -1
		}
		return int(first) + int(binary.LittleEndian.Uint16(b[:]))
	default:
		if w.mem.ReadMemory(li+4*uint64(pc), b[:4]) != nil {
			return -1
		}
		return int(first) + int(binary.LittleEndian.Uint32(b[:]))
	}
}

// linkPC is the return PC into the function below the frame at frame
// (debug_framepc's): its link when called from Lua, or when the frame is
// a continuation (a trace stitched to a C function's call, a
// metamethod's) the PC the slot below it keeps (frame_contpc).
func (w *Walker) linkPC(frame uint64) (uint64, bool) {
	ftsz, ok := w.u32(frame + 4)
	switch {
	case !ok:
		return 0, false
	case ftsz&3 == 0:
		return ftsz, true
	case ftsz&frameTypeP == frameCont && frame >= 8:
		pc, ok := w.u32(frame - 8 + 4)
		return pc, ok && pc&3 == 0 && pc != 0
	}
	return 0, false
}

// funcName is lj_debug_funcname for the frame at frame: the name its
// caller used for it, found from the caller's call instruction.
func (w *Walker) funcName(frame uint64) string {
	ftsz, ok := w.u32(frame + 4)
	if ok && ftsz&frameTypeP == frameVarg {
		// A vararg function's name is that of the frame it was called in.
		size := uint64(int64(int32(uint32(ftsz)))) &^ 7
		if size == 0 || size > frame {
			return ""
		}
		frame -= size
		ftsz, ok = w.u32(frame + 4)
	}
	if !ok {
		return ""
	}
	ret, ok := w.linkPC(frame)
	if !ok {
		return "" // called from C: no name
	}
	ins, ok := w.u32(ret - 4)
	if !ok {
		return ""
	}
	caller := frame - 8*(1+(ins>>8)&0xff)
	if ftsz&3 != 0 { // a continuation: its link is the caller's delta
		caller = frame - uint64(int64(int32(ftsz)))&^7
	}
	cfn, ok := w.u32(caller)
	if !ok {
		return ""
	}
	var ffid [1]byte
	if w.mem.ReadMemory(cfn+6, ffid[:]) != nil || ffid[0] != 0 {
		return ""
	}
	pcRef, ok := w.u32(cfn + w.l.fnPC)
	if !ok {
		return ""
	}
	pt := pcRef - w.l.protoSize
	bc := pt + w.l.protoSize
	// The opcode numbering must be this table's: a prototype starts with
	// a FUNC* instruction.
	if head, ok := w.u32(bc); !ok || head&0xff < bcFUNCF || head&0xff > bcJFUNCV {
		return ""
	}
	ip := ret - 4 // the call instruction
	op := int(ins & 0xff)
	if op < bcCALLM || op > bcITERN {
		return "" // a metamethod or something else called it
	}
	slot := uint64((ins >> 8) & 0xff)
	if op == bcITERC {
		slot -= 3
	}
	key := [3]uint64{pt, ip, slot}
	name, ok := w.names[key]
	if !ok {
		name = w.slotName(pt, bc, ip, slot)
		if w.names == nil {
			w.names = map[[3]uint64]string{}
		}
		w.names[key] = name
	}
	return name
}

// slotName is lj_debug_slotname: what slot held at instruction ip.
func (w *Walker) slotName(pt, bc, ip, slot uint64) string {
	// Bounded: a MOV chain is short, and the backward search stops at
	// the prototype's start or after maxScanBack instructions (damaged
	// memory can make ip anything).
	const maxScanBack = 1 << 16
	for guard := 0; guard < 64; guard++ {
		if name := w.varName(pt, (ip-bc)/4, slot); name != "" {
			return name
		}
		moved := false
		for steps := 0; ip > bc && steps < maxScanBack; steps++ {
			ip -= 4
			if ip <= bc {
				break
			}
			ins, ok := w.u32(ip)
			if !ok {
				return ""
			}
			op := int(ins & 0xff)
			if op >= len(bcModes) {
				return ""
			}
			ra := uint64((ins >> 8) & 0xff)
			switch bcModes[op] {
			case 'b':
				if slot >= ra && (op != bcKNIL || slot <= ins>>16) {
					return ""
				}
			case 'd':
				if ra != slot {
					continue
				}
				switch op {
				case bcMOV:
					slot = ins >> 16
					moved = true
				case bcGGET:
					return w.kstr(pt, ins>>16)
				case bcTGETS:
					return w.kstr(pt, (ins>>16)&0xff)
				case bcUGET:
					return w.uvName(pt, ins>>16)
				default:
					return ""
				}
			}
			if moved {
				break
			}
		}
		if !moved {
			return ""
		}
	}
	return ""
}

// kstr is the string constant ~idx of prototype pt (GC constants lie
// below pt->k).
func (w *Walker) kstr(pt, idx uint64) string {
	k, ok := w.u32(pt + w.l.pK)
	if !ok {
		return ""
	}
	return w.str(w.gcref(k - 4*(idx+1)))
}

// uvName is the name of upvalue idx (uvinfo: NUL-terminated names).
func (w *Walker) uvName(pt, idx uint64) string {
	p, ok := w.u32(pt + w.l.pUvinfo)
	if !ok || p == 0 {
		return ""
	}
	buf := make([]byte, 1024)
	if w.mem.ReadMemory(p, buf) != nil {
		return ""
	}
	names := strings.Split(string(buf), "\x00")
	if idx < uint64(len(names)) {
		return names[idx]
	}
	return ""
}

// varName is debug_varname: the name of local slot at position pc.
func (w *Walker) varName(pt, pc, slot uint64) string {
	p, ok := w.u32(pt + w.l.pVarinfo)
	if !ok || p == 0 {
		return ""
	}
	buf := make([]byte, 4096)
	if w.mem.ReadMemory(p, buf) != nil {
		return ""
	}
	i := 0
	uleb := func() (uint64, bool) {
		var v uint64
		for shift := 0; i < len(buf) && shift < 35; shift += 7 {
			b := buf[i]
			i++
			v |= uint64(b&0x7f) << shift
			if b < 0x80 {
				return v, true
			}
		}
		return 0, false
	}
	var lastpc uint64
	for i < len(buf) {
		start := i
		vn := buf[i]
		if vn == 0 {
			return "" // VARNAME_END
		}
		if vn >= 7 { // a name, NUL-terminated; below 7: internal (for loops)
			for i < len(buf) && buf[i] != 0 {
				i++
			}
		}
		i++
		d1, ok1 := uleb()
		lastpc += d1
		if lastpc > pc || !ok1 {
			return ""
		}
		d2, ok2 := uleb()
		if !ok2 {
			return ""
		}
		if pc < lastpc+d2 {
			if slot == 0 {
				if vn < 7 {
					return ""
				}
				return string(buf[start : start+strings.IndexByte(string(buf[start:]), 0)])
			}
			slot--
		}
	}
	return ""
}
