// Package luajit reads the Lua frames of LuaJIT 2.1 from outside the
// process: of any process that runs it (the luajit interpreter, a
// program linking libluajit-5.1.so, one that links the VM in), as the
// registered runtime "lua" (--no-lua), and of the lua_States a program
// that embeds LuaJIT finds itself (Tarantool's fibers, package fibers,
// compose Walker and Stack).
//
// The frames. A lua_State's Lua stack holds, below each frame's base, a
// frame link: the function and either the return PC into the caller's
// bytecode (a Lua frame) or a size and type (a C entry, a vararg or
// pcall frame). Walking the links from L->base down to L->stack gives
// the frames, innermost first, as lua_getstack does; a Lua function's
// current line comes from the return PC its callee saved, its name (as
// lua_getinfo "n" gives it) from the instruction that loaded the called
// function into the caller's call slot: a local variable, a global
// (GGET), a field or method (TGETS), an upvalue (UGET). Both of LuaJIT
// 2.1's layouts are read: GC64 (8-byte references, two-slot frame
// links; Debian's luajit) and 32-bit references (Debian's Tarantool).
// Their offsets are hard-coded from LuaJIT 2.1's headers (a stripped
// binary has no types to read them from); a binary with DWARF types has
// them from there (LayoutFrom: Tarantool's fork differs in GCstr and
// global_State).
//
// Finding the lua_States without symbols. Every entry into the VM from
// C (lua_call, lua_pcall, lua_cpcall, a coroutine's resume) runs in a C
// frame the VM lays out itself (vm_x64.dasc): its stack pointer is what
// L->cframe points to, and it saves L and the previous C frame at fixed
// offsets from it. ScanStack searches each thread's native stack, from
// its stack pointer up (at most 1 MiB), for such frames, and keeps one
// only when the lua_State it names is one whose chain of C frames
// reaches it; each activation's Lua frames (a walk crossing a C entry's
// link starts the next) are anchored to their C frame
// (target.InterpFrame.Anchor), so the splicer puts them before (leafward
// of) the VM's native frame that runs them whether or not the VM has
// symbols, and the Lua frames a C function calls back (table.sort's
// comparator) go before their own VM frame, above that C function's. From any lua_State found, G(L) is its
// global_State, whose list of GC objects (walked from gc.root, bounded,
// loops detected) holds every coroutine: those suspended in
// coroutine.yield, and those created and not resumed, are fibers of
// kind "lua" with --fibers (runtimes.Options.Fibers), each with its Lua
// frames and no native ones; without it a warning counts them.
//
// A thread stopped while it runs Lua code (its stack pointer at the C
// frame: the interpreter; just below it, in anonymous code: a JIT trace)
// has a stale L->base; its frames are walked from the interpreter's
// BASE register (rdx), checked to be a Lua function's frame on the
// stack, and the innermost line from its PC register (rbx), checked to
// be in that function's bytecode. A trace keeps no PC: its innermost
// line is 0, with a warning. Registers that do not check out show no
// frames for that lua_State, with a warning, rather than guessed ones.
//
// A live process's threads are searched in their pause (the stack
// pointers from /proc/PID/task/TID/syscall), and the lua_States found
// there copied with their Lua stacks, the part of a walk that changes as
// Lua runs (During); the walk itself runs after the pause, over those
// copies, the native stacks the pause copied, and the process for the
// rest (prototypes, bytecode and strings, which do not change under a
// running function, and the suspended coroutines, which do not change
// until resumed). A core is read directly.
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
