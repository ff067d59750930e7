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
	// Line is the current line, -1 for a C function or when unknown.
	Line int
	// FirstLine is a Lua function's first line (0: a main chunk).
	FirstLine int
	// FFID is 0 for a Lua function, 1 for a C function, and a fast
	// function's (a builtin's) number above.
	FFID int
	// Activation counts the entries from C (lua_call, lua_pcall,
	// lua_cpcall, a coroutine's resume) below the frame in its
	// lua_State, innermost first.
	Activation int
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
