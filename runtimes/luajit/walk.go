package luajit

import (
	"encoding/binary"
	"strings"

	"github.com/rewindstack/rewind/target"
)

// maxFrames bounds the Lua frames of one lua_State (a loop of frame
// links in damaged memory ends there).
const maxFrames = 512

// gcvMask keeps the pointer of a GC64 tagged value (LJ_GCVMASK).
const gcvMask = 1<<47 - 1

// frameC is the type of a frame entered from C (lua_call, lua_pcall:
// FRAME_C; lua_cpcall: FRAME_CP, which shares its low two bits).
const frameC = 1

// Walker reads lua_States' frames. What it derives from prototypes
// and bytecode alone, which do not change while the fibers are parked, is
// remembered: thousands of fibers parked in one function cost its
// bytecode's reads (one system call each on a live process) once.
type Walker struct {
	l   *Layout
	mem target.Memory

	places map[[2]uint64]luaPlace // (prototype's bytecode or C function, return PC into it) -> its source and line
	names  map[[3]uint64]string   // (prototype, call instruction, slot) -> slotName
	byRet  map[uint64]string      // return PC of a call from Lua -> the called function's name

	scratch [8]byte // the buffer of u32 and u64 (not one allocation per read)
}

// NewWalker returns a walker of the lua_States in mem, laid out as l
// says.
func NewWalker(l *Layout, mem target.Memory) *Walker { return &Walker{l: l, mem: mem} }

// luaPlace is a function's chunk and current line, and what kind of
// function it is.
type luaPlace struct {
	source    string
	line      int
	firstLine int
	ffid      int // 0: a Lua function, 1: a C function, more: a fast function
}

func (w *Walker) u32(addr uint64) (uint64, bool) {
	b := w.scratch[:4]
	if w.mem.ReadMemory(addr, b) != nil {
		return 0, false
	}
	return uint64(binary.LittleEndian.Uint32(b)), true
}

func (w *Walker) u64(addr uint64) (uint64, bool) {
	b := w.scratch[:8]
	if w.mem.ReadMemory(addr, b) != nil {
		return 0, false
	}
	return binary.LittleEndian.Uint64(b), true
}

// byte1 reads one byte.
func (w *Walker) byte1(addr uint64) (byte, bool) {
	b := w.scratch[:1]
	if w.mem.ReadMemory(addr, b) != nil {
		return 0, false
	}
	return b[0], true
}

// ref reads a GCRef or MRef.
func (w *Walker) ref(addr uint64) (uint64, bool) {
	if w.l.GC64 {
		return w.u64(addr)
	}
	return w.u32(addr)
}

func (w *Walker) gcref(addr uint64) uint64 { v, _ := w.ref(addr); return v }

// fr2 is the number of extra slots of a frame link (LJ_FR2).
func (w *Walker) fr2() uint64 {
	if w.l.GC64 {
		return 1
	}
	return 0
}

// link reads the frame link at frame (the slot below a frame's base):
// its function and its ftsz (a return PC, or a delta and type),
// sign-extended.
func (w *Walker) link(frame uint64) (fn, ftsz uint64, ok bool) {
	if w.l.GC64 {
		ft, ok1 := w.u64(frame)
		f, ok2 := w.u64(frame - 8)
		return f & gcvMask, ft, ok1 && ok2
	}
	f, ok1 := w.u32(frame)
	ft, ok2 := w.u32(frame + 4)
	return f, uint64(int64(int32(uint32(ft)))), ok1 && ok2
}

// pc is a Lua link's return PC (32 bits without GC64).
func (w *Walker) pc(ftsz uint64) uint64 {
	if w.l.GC64 {
		return ftsz
	}
	return ftsz & 0xffffffff
}

// Frames returns L's Lua frames, innermost first (at most maxFrames).
func (w *Walker) Frames(L uint64) []Frame {
	fs, _ := w.Walk(L)
	return fs
}

// Walk returns L's Lua frames, innermost first, and why the walk ended
// before the stack's bottom ("" when it reached it). Each frame's
// Activation counts the entries from C (lua_call, lua_pcall,
// lua_cpcall) below which it runs, innermost first.
func (w *Walker) Walk(L uint64) ([]Frame, string) { return w.WalkFrom(L, 0, 0) }

// WalkFrom is Walk from the frame whose base is base (0: L->base), the
// innermost frame's current PC being pc (0: unknown): what the
// interpreter's registers say while it runs Lua code, L->base then
// being that of its last call out of Lua.
func (w *Walker) WalkFrom(L, base, pc uint64) ([]Frame, string) {
	b, ok1 := w.u64(L + w.l.LBase)
	stack, ok2 := w.ref(L + w.l.LStack)
	if !ok1 || !ok2 {
		return nil, "the lua_State is unreadable"
	}
	if base == 0 {
		base = b
	}
	bot := stack + 8*w.fr2()
	if base <= bot || base-bot > 1<<30 || base&7 != 0 {
		return nil, "" // no frames (a coroutine not started), or not a stack
	}
	var out []Frame
	var next uint64 // the frame above (the callee's link), 0 for the innermost
	pseudo := false // the frame is a vararg call's original, not a level
	act := 0
	for frame := base - 8; frame > bot; {
		if len(out) >= maxFrames {
			return out, "more than 512 Lua frames"
		}
		fn, ftsz, ok := w.link(frame)
		if !ok {
			return out, "a frame link is unreadable"
		}
		if fn != L && !pseudo { // dummy frames of coroutines hold L itself
			f := w.frame(fn, frame, next, pc)
			f.Activation = act
			out = append(out, f)
		}
		// A vararg function runs in a copy of its frame above its
		// arguments, linked (FRAME_VARG) to the frame it was called in,
		// which lj_debug_frame skips.
		pseudo = ftsz&frameTypeP == frameVarg
		next = frame
		if ftsz&3 == 0 { // a Lua frame: ftsz is the return PC
			ins, ok := w.u32(w.pc(ftsz) - 4)
			if !ok {
				return out, "a return PC is unreadable"
			}
			frame -= 8 * (1 + w.fr2() + (ins>>8)&0xff)
		} else {
			if ftsz&3 == frameC {
				act++
			}
			size := ftsz &^ 7
			if size == 0 || size > frame-stack {
				return out, "a frame link's size is out of the stack"
			}
			frame -= size
		}
	}
	return out, ""
}

// frame describes the function of the frame at frame; next is the frame
// above it (whose link holds this function's current PC), 0 if none
// (top is then its PC, 0 if unknown).
func (w *Walker) frame(fn, frame, next, top uint64) Frame {
	ret := top // the return PC into fn (the innermost's: top), 0 if unknown
	if next != 0 {
		ret, _ = w.linkPC(next)
	}
	// Closures of one prototype share its places: the key is the
	// prototype's bytecode (a Lua function's pc), or the function.
	id := fn
	ffid, ok := w.byte1(fn + w.l.fnFFID)
	if ok && ffid == 0 {
		if pc, ok := w.ref(fn + w.l.fnPC); ok {
			id = pc
		}
	}
	key := [2]uint64{id, ret}
	place, ok := w.places[key]
	if !ok {
		place = w.place(fn, ret)
		if w.places == nil {
			w.places = map[[2]uint64]luaPlace{}
		}
		w.places[key] = place
	}
	f := Frame{Source: place.source, Line: place.line, FirstLine: place.firstLine, FFID: place.ffid}
	f.Name = w.funcName(frame)
	return f
}

// place is the chunk and line of function fn when it returns to ret
// (0: unknown).
func (w *Walker) place(fn, ret uint64) luaPlace {
	p := luaPlace{source: "=[C]", line: -1, ffid: 1}
	var ffid [1]byte
	if w.mem.ReadMemory(fn+w.l.fnFFID, ffid[:]) != nil {
		return p
	}
	p.ffid = int(ffid[0])
	if p.ffid != 0 {
		return p
	}
	if pcRef, ok := w.ref(fn + w.l.fnPC); ok {
		pt := pcRef - w.l.protoSize
		p.source = w.str(w.gcref(pt + w.l.pChunk))
		first, _ := w.u32(pt + w.l.pFirst)
		p.firstLine = int(int32(uint32(first)))
		p.line = w.line(pt, w.pcOf(pt, ret))
	}
	return p
}

// str reads a GCstr's contents (at most 256 bytes).
func (w *Walker) str(s uint64) string {
	if s == 0 {
		return ""
	}
	n, ok := w.u32(s + w.l.strLen)
	if !ok {
		return ""
	}
	b := make([]byte, min(n, 256))
	if w.mem.ReadMemory(s+w.l.strData, b) != nil {
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
	if ret <= bc || ret-bc > 1<<30 {
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
	li, ok := w.ref(pt + w.l.pLineinfo)
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
	_, ftsz, ok := w.link(frame)
	switch {
	case !ok:
		return 0, false
	case ftsz&3 == 0:
		return w.pc(ftsz), true
	case ftsz&frameTypeP == frameCont && frame >= 16:
		var pc uint64
		if w.l.GC64 {
			pc, ok = w.u64(frame - 16)
		} else {
			pc, ok = w.u32(frame - 8 + 4)
		}
		return pc, ok && pc&3 == 0 && pc != 0
	}
	return 0, false
}

// funcName is lj_debug_funcname for the frame at frame: the name its
// caller used for it, found from the caller's call instruction.
func (w *Walker) funcName(frame uint64) string {
	_, ftsz, ok := w.link(frame)
	if ok && ftsz&frameTypeP == frameVarg {
		// A vararg function's name is that of the frame it was called in.
		size := ftsz &^ 7
		if size == 0 || size > frame {
			return ""
		}
		frame -= size
		_, ftsz, ok = w.link(frame)
	}
	if !ok {
		return ""
	}
	ret, ok := w.linkPC(frame)
	if !ok {
		return "" // called from C: no name
	}
	// The return PC names the call instruction, so its prototype and
	// the slot called: the name, once found, is the same for every frame
	// called from there.
	if name, ok := w.byRet[ret]; ok && ftsz&3 == 0 {
		return name
	}
	ins, ok := w.u32(ret - 4)
	if !ok {
		return ""
	}
	caller := frame - 8*(1+w.fr2()+(ins>>8)&0xff)
	if ftsz&3 != 0 { // a continuation: its link is the caller's delta
		caller = frame - ftsz&^7
	}
	name := w.callerName(caller, ret, ins)
	if ftsz&3 == 0 {
		if w.byRet == nil {
			w.byRet = map[uint64]string{}
		}
		w.byRet[ret] = name
	}
	return name
}

// callerName is the name the Lua function of the frame at caller gave
// the function it called by instruction ins (at ret-4).
func (w *Walker) callerName(caller, ret, ins uint64) string {
	cfn, _, ok := w.link(caller)
	if !ok {
		return ""
	}
	var ffid [1]byte
	if w.mem.ReadMemory(cfn+w.l.fnFFID, ffid[:]) != nil || ffid[0] != 0 {
		return ""
	}
	pcRef, ok := w.ref(cfn + w.l.fnPC)
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
	if op < bcCALLM || op > bcITERN || ip <= bc || ip-bc > 1<<30 {
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
	// the prototype's start or after maxScanBack instructions in all
	// (damaged memory can make ip anything).
	const maxScanBack = 1 << 12
	steps := 0
	for guard := 0; guard < 16; guard++ {
		if name := w.varName(pt, (ip-bc)/4, slot); name != "" {
			return name
		}
		moved := false
		for ; ip > bc && steps < maxScanBack; steps++ {
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
	k, ok := w.ref(pt + w.l.pK)
	if !ok {
		return ""
	}
	return w.str(w.gcref(k - w.l.refSize()*(idx+1)))
}

// readUpTo reads up to n bytes at p, fewer when the mapping ends
// sooner (a page at a time from there).
func (w *Walker) readUpTo(p uint64, n int) []byte {
	buf := make([]byte, n)
	if w.mem.ReadMemory(p, buf) == nil {
		return buf
	}
	got := 0
	for got < n {
		step := min(n-got, int(4096-(p+uint64(got))&4095))
		if w.mem.ReadMemory(p+uint64(got), buf[got:got+step]) != nil {
			break
		}
		got += step
	}
	return buf[:got]
}

// uvName is the name of upvalue idx (uvinfo: NUL-terminated names).
func (w *Walker) uvName(pt, idx uint64) string {
	p, ok := w.ref(pt + w.l.pUvinfo)
	if !ok || p == 0 {
		return ""
	}
	names := strings.Split(string(w.readUpTo(p, 1024)), "\x00")
	if idx+1 < uint64(len(names)) {
		return names[idx]
	}
	return ""
}

// varName is debug_varname: the name of local slot at position pc.
func (w *Walker) varName(pt, pc, slot uint64) string {
	p, ok := w.ref(pt + w.l.pVarinfo)
	if !ok || p == 0 {
		return ""
	}
	buf := w.readUpTo(p, 4096)
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
				end := strings.IndexByte(string(buf[start:]), 0)
				if end < 0 {
					return ""
				}
				return string(buf[start : start+end])
			}
			slot--
		}
	}
	return ""
}
