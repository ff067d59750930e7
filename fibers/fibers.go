// Package fibers turns the saved execution contexts of inactive fibers and
// coroutines into unwindable contexts (target.Context of kind
// target.KindFiber), read from outside the process: from a live snapshot or
// a core file.
//
// A fiber that is not running is a register set its switch routine saved
// in memory, and a stack. Unwinding it needs only the resumed PC, SP and
// frame pointer, plus the callee-saved registers CFI rules may refer to;
// the same unwinder core then walks it with every method. The kinds, named
// as in `rewind dump --fiber KIND@ADDR`:
//
//   - ucontext: ADDR is a glibc ucontext_t (getcontext, swapcontext,
//     makecontext). swapcontext saved the return address into its caller,
//     so frame #0 is the function that switched away.
//   - fcontext: ADDR holds a boost.context fcontext_t, the stack pointer
//     jump_fcontext saved. The record it points at changed between boost
//     releases (a stack-guard slot since 1.81, an optional CET shadow-stack
//     slot), so its size and the slots of rbp and rbx are read from the
//     process's own jump_fcontext code, never assumed.
//   - coro: ADDR holds a libcoro coro_context (Tarantool's fibers), whose
//     first word is the saved stack pointer: on x86-64, r15 r14 r13 r12 rbx
//     rbp and the return address, the resumed SP 56 bytes above.
//   - jmpbuf: ADDR is a glibc jmp_buf or sigjmp_buf. glibc mangles the
//     saved rbp, rsp and PC with the pointer guard; it is read from the TCB
//     of one of the process's threads (fs_base + 0x30 on x86-64).
//   - regs: no memory at all, the registers given (pc=…,sp=…,fp=…).
//
// A context that cannot be read (unmapped, a guard it cannot find, an
// unknown layout) becomes a context with Err set: it is reported, not
// unwound, and never fails the dump. A bad context that reads (garbage
// registers) ends its own walk with a stop reason like any stack.
//
// Tarantool's fibers (every cord's, found through the binary's DWARF
// types) and their Lua frames are read by Tarantool and LuaFrames.
//
// Checked against real programs: on x86-64 every kind and Tarantool 2.6;
// on aarch64, ucontext and jmp_buf (in a qemu-user core). The aarch64
// libcoro and boost records follow their sources and are unchecked.
//
// # Scanning
//
// Scanning (dump --fiber-scan: ScanLive, ScanCore; x86-64) finds saved
// contexts without symbols: it reads the process's writable memory, or
// the core's (its anonymous segments included), smaller mappings first,
// within limits it keeps (ScanLimits: 512 MiB considered, a failed read
// charged as a successful one, and 2 s by default; a mapping is left
// after 16 MiB of failed reads in a row; ScanStats.Note says in one line
// what was left), and takes, 8-byte aligned:
//
//   - a glibc ucontext_t (x86-64) where uc_mcontext.fpregs points at the
//     structure's own __fpregs_mem (byte 424), as getcontext and
//     swapcontext leave it;
//   - a glibc jmp_buf whose rsp and pc, demangled with the process's
//     pointer guard, are a stack address and a return address;
//   - a word that points at a libcoro record (coro) or, when the process
//     has boost.context's jump_fcontext, at an fcontext record (its size
//     read from that code), whose return address follows a call
//     instruction in executable memory, and a call that reaches the
//     switch routine: the function called is jump_fcontext (decoded, its
//     record size the process's) or libcoro's coro_transfer (pushes of
//     the callee-saved registers, then mov %rsp,(%rdi)), or it jumps to
//     it within its first 512 bytes (Tarantool's fiber_yield ends with
//     jmp coro_transfer); PLT entries are followed through the GOT. A call
//     through a register cannot be followed, and its record is taken
//     unproven. The word must be stored outside the stack it points into
//     (in another mapping, or 1 MiB or more away in the same one:
//     Tarantool's slab arena holds a fiber's stack and its struct fiber
//     in one mapping when no guard page falls between them), because
//     stacks are full of pointers into themselves.
//
// The guards against false positives: the resumed stack pointer must lie
// in writable memory; the resumed PC must follow a call instruction (e8
// rel32, or ff /2) in an executable mapping, or, for a ucontext made by
// makecontext and never run, be in executable memory; of contexts whose
// stack pointers are less than minFiberGap apart (one stack), the scan
// keeps the proven ones (ucontext_t and jmp_buf, whose signatures are
// strong, and records whose call reaches the switch routine), or when
// there is none the lowest unproven one. No mapping says whether a stack
// is in use: the kernel merges adjacent anonymous mappings of equal flags,
// so one mapping may hold the stack a thread runs on and parked fibers'
// beside it (stacks carved from one mmap), and the same program must give
// the same contexts whether guard pages split them or not. Once the
// contexts and the threads are walked, Phantoms tells the stale ones
// by their frames: records in the live part of a running stack (main's
// own ucontext_t) or below it whose frames climb into it, records that
// pass through another context's switch or whose frames are older than
// another's on the same stack, and records left in the live part of a
// parked fiber's stack.
package fibers

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"sync"

	"github.com/rewindstack/rewind/internal/fsafe"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/target"
)

// Kinds of explicit contexts.
const (
	UContext = "ucontext"
	FContext = "fcontext"
	Coro     = "coro"
	JmpBuf   = "jmpbuf"
	Regs     = "regs"
)

// Spec names one saved context: KIND@ADDR, or regs@pc=…,sp=…,fp=….
type Spec struct {
	Kind string
	// Addr is the address of the memory holding the context (the
	// ucontext_t, the variable holding the fcontext_t, the coro_context,
	// the jmp_buf); 0 for regs.
	Addr uint64
	// PC, SP and FP are the registers of a regs spec (FP 0 when not
	// given).
	PC, SP, FP uint64
}

// ParseSpec parses KIND@ADDR (ADDR in hex with 0x, or decimal) or
// regs@pc=ADDR,sp=ADDR[,fp=ADDR].
func ParseSpec(s string) (Spec, error) {
	kind, arg, ok := strings.Cut(s, "@")
	if !ok || arg == "" {
		return Spec{}, fmt.Errorf("fiber %q: want KIND@ADDR (KIND: ucontext, fcontext, coro, jmpbuf) or regs@pc=ADDR,sp=ADDR,fp=ADDR", s)
	}
	sp := Spec{Kind: kind}
	switch kind {
	case UContext, FContext, Coro, JmpBuf:
		a, err := strconv.ParseUint(arg, 0, 64)
		if err != nil || a == 0 {
			return Spec{}, fmt.Errorf("fiber %q: %q is not an address", s, arg)
		}
		sp.Addr = a
	case Regs:
		for _, kv := range strings.Split(arg, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, err := strconv.ParseUint(v, 0, 64)
			if err != nil {
				return Spec{}, fmt.Errorf("fiber %q: %q is not REG=ADDR", s, kv)
			}
			switch k {
			case "pc":
				sp.PC = n
			case "sp":
				sp.SP = n
			case "fp":
				sp.FP = n
			default:
				return Spec{}, fmt.Errorf("fiber %q: unknown register %q (pc, sp, fp)", s, k)
			}
		}
		if sp.PC == 0 || sp.SP == 0 {
			return Spec{}, fmt.Errorf("fiber %q: regs needs pc= and sp=", s)
		}
	default:
		return Spec{}, fmt.Errorf("fiber %q: unknown kind %q (ucontext, fcontext, coro, jmpbuf, regs)", s, kind)
	}
	return sp, nil
}

// String renders s as ParseSpec reads it.
func (s Spec) String() string {
	if s.Kind == Regs {
		return fmt.Sprintf("regs@pc=%#x,sp=%#x,fp=%#x", s.PC, s.SP, s.FP)
	}
	return fmt.Sprintf("%s@%#x", s.Kind, s.Addr)
}

// slot is one saved register: DWARF number, byte offset in the record,
// and whether glibc mangled it with the pointer guard.
type slot struct {
	reg     int
	off     uint64
	mangled bool
}

// record is where a kind keeps its registers. The record starts at the
// spec's address (direct) or at the pointer stored there; the resumed SP is
// either a slot (spSlot >= 0) or the record's start plus spAdd.
type record struct {
	indirect bool
	size     uint64
	slots    []slot
	pcSlot   int // index in slots of the PC (or LR)
	spSlot   int // index in slots of the SP, -1 when spAdd applies
	spAdd    uint64
}

// layouts returns the fixed layouts (fcontext's is derived from the
// process's code: see fcontextRecord). They are made on first use: built
// at start, the maps cost every rewind command 0.1-0.2 ms.
var layouts = sync.OnceValue(func() map[regs.Arch]map[string]record {
	return map[regs.Arch]map[string]record{
		regs.AMD64: {
			// glibc's ucontext_t (layout: package regs): the registers
			// getcontext and swapcontext save, the callee-saved ones, SP
			// and PC; the record ends after the PC's slot.
			UContext: amd64UContext(12, 13, 14, 15, regs.AMD64RBP, regs.AMD64RBX, regs.AMD64RSP, regs.AMD64RIP),
			Coro: {indirect: true, size: 56, slots: []slot{
				{15, 0, false}, {14, 8, false}, {13, 16, false}, {12, 24, false},
				{regs.AMD64RBX, 32, false}, {regs.AMD64RBP, 40, false}, {regs.AMD64RIP, 48, false},
			}, pcSlot: 6, spSlot: -1, spAdd: 56},
			// __jmpbuf: rbx, rbp*, r12..r15, rsp*, pc* (* mangled).
			JmpBuf: {size: 64, slots: []slot{
				{regs.AMD64RBX, 0, false}, {regs.AMD64RBP, 8, true},
				{12, 16, false}, {13, 24, false}, {14, 32, false}, {15, 40, false},
				{regs.AMD64RSP, 48, true}, {regs.AMD64RIP, 56, true},
			}, pcSlot: 7, spSlot: 6},
		},
		regs.ARM64: {
			// uc_mcontext at 176: fault_address, regs[31] at 184, sp 432, pc 440.
			UContext: {size: 448, slots: append(arm64Callee(184+19*8, 8),
				slot{regs.ARM64SP, 432, false}, slot{regs.ARM64PC, 440, false}),
				pcSlot: 12, spSlot: 11},
			// libcoro: x19..x28, x29, x30 (the return address) at 0..0x58,
			// d8..d15 after; 160 bytes.
			Coro: {indirect: true, size: 160, slots: append(arm64Callee(0, 8), slot{regs.ARM64PC, 0x58, false}),
				pcSlot: 11, spSlot: -1, spAdd: 160},
			// glibc's __jmp_buf: x19..x28, x29, then the return address (LR)
			// and SP mangled (xor with the guard), d8..d15 after.
			JmpBuf: {size: 112, slots: append(arm64Callee(0, 8)[:11],
				slot{regs.ARM64PC, 88, true}, slot{regs.ARM64SP, 104, true}),
				pcSlot: 11, spSlot: 12},
			// boost.context: d8..d15, x19..x28 at 0x40, fp 0x90, lr 0x98, pc 0xa0.
			FContext: {indirect: true, size: 0xb0, slots: append(arm64Callee(0x40, 8), slot{regs.ARM64PC, 0xa0, false}),
				pcSlot: 11, spSlot: -1, spAdd: 0xb0},
		},
	}
})

// amd64UContext is the record of a glibc ucontext_t holding DWARF
// registers rs, the last two the SP and the PC.
func amd64UContext(rs ...int) record {
	r := record{spSlot: len(rs) - 2, pcSlot: len(rs) - 1}
	for _, n := range rs {
		off, _ := regs.AMD64UContextOffset(n)
		r.slots = append(r.slots, slot{n, off, false})
		r.size = max(r.size, off+8)
	}
	return r
}

// arm64Callee is the slots of x19..x30 from off, step apart.
func arm64Callee(off, step uint64) []slot {
	var s []slot
	for r := 19; r <= 30; r++ {
		s = append(s, slot{r, off + uint64(r-19)*step, false})
	}
	return s
}

// ErrNoGuard is returned for a jmp_buf when no thread's pointer guard can
// be read.
var ErrNoGuard = errors.New("pointer guard unknown (no thread's TCB is readable), so the jmp_buf's rbp, rsp and pc cannot be demangled")

// Explicit reads the contexts specs name from mem (a Copier's Memory; nil
// for tg's own) and returns one fiber context per spec (Err set for those
// that cannot be read), to be appended to tg.Contexts; their walks read
// mem too. Their TID is 0: an explicit context belongs to no known thread.
func Explicit(tg *target.Target, specs []Spec, mem target.Memory) []target.Context {
	if mem == nil {
		mem = tg.Mem
	}
	out := make([]target.Context, 0, len(specs))
	for _, sp := range specs {
		out = append(out, withRegs(tg, mem, sp, target.Context{Kind: target.KindFiber, Runtime: sp.Kind, Saved: sp.Addr, Mem: mem}))
	}
	return out
}

// withRegs sets c's registers from the context sp names, or its Err.
func withRegs(tg *target.Target, mem target.Memory, sp Spec, c target.Context) target.Context {
	r, err := Read(tg, mem, sp)
	if err != nil {
		c.Err = err
	} else {
		c.Regs = r
	}
	return c
}

// Read returns the registers of the context sp names, reading mem (the
// target's memory, or copies over it) and tg's mapped objects.
func Read(tg *target.Target, mem target.Memory, sp Spec) (regs.Regs, error) {
	r := regs.New(tg.Arch)
	if sp.Kind == Regs {
		r.Set(tg.Arch.PC(), sp.PC)
		r.Set(tg.Arch.SP(), sp.SP)
		if sp.FP != 0 {
			r.Set(tg.Arch.FP(), sp.FP)
		}
		return r, nil
	}
	rec, ok := layouts()[tg.Arch][sp.Kind]
	if sp.Kind == FContext && tg.Arch == regs.AMD64 {
		var err error
		if rec, err = fcontextRecord(tg); err != nil {
			return r, err
		}
		ok = true
	}
	if !ok {
		return r, fmt.Errorf("%s contexts on %s are not supported", sp.Kind, tg.Arch)
	}
	base := sp.Addr
	if rec.indirect {
		var b [8]byte
		if err := mem.ReadMemory(sp.Addr, b[:]); err != nil {
			return r, fmt.Errorf("%s at %#x: %w", sp.Kind, sp.Addr, err)
		}
		if base = binary.LittleEndian.Uint64(b[:]); base == 0 {
			return r, fmt.Errorf("%s at %#x: the saved stack pointer is 0 (the context was never saved)", sp.Kind, sp.Addr)
		}
	}
	buf := make([]byte, rec.size)
	if err := mem.ReadMemory(base, buf); err != nil {
		return r, fmt.Errorf("%s at %#x: saved registers at %#x: %w", sp.Kind, sp.Addr, base, err)
	}
	var guard uint64
	for _, s := range rec.slots {
		if s.mangled {
			g, err := pointerGuard(tg, mem)
			if err != nil {
				return r, err
			}
			guard = g
			break
		}
	}
	for _, s := range rec.slots {
		v := binary.LittleEndian.Uint64(buf[s.off:])
		if s.mangled {
			v = demangleArch(tg.Arch, v, guard)
		}
		r.Set(s.reg, v)
	}
	if rec.spSlot < 0 {
		r.Set(tg.Arch.SP(), base+rec.spAdd)
	}
	if tg.Arch == regs.ARM64 && sp.Kind == UContext {
		// glibc's aarch64 swapcontext saves, as the PC and as x30, a
		// label inside itself where it resumes, and the caller's return
		// address as x1, which it moves back to x30 there: the walk
		// starts in swapcontext and returns to the caller.
		pc, _ := r.Get(regs.ARM64PC)
		if lr, _ := r.Get(regs.ARM64X30); lr == pc {
			r.Set(regs.ARM64X30, binary.LittleEndian.Uint64(buf[184+8:]))
		}
	}
	return r, nil
}

// demangle undoes glibc's PTR_MANGLE on x86-64: xor with the guard, then
// rotate left by 0x11; so rotate right, then xor.
func demangle(v, guard uint64) uint64 { return bits.RotateLeft64(v, -0x11) ^ guard }

// demangleArch undoes PTR_MANGLE of arch: on aarch64 glibc only xors.
func demangleArch(arch regs.Arch, v, guard uint64) uint64 {
	if arch == regs.ARM64 {
		return v ^ guard
	}
	return demangle(v, guard)
}

// pointerGuard reads glibc's pointer guard: on x86-64 from the TCB of the
// first thread whose thread pointer is known (every thread holds the same
// one, at fs_base+0x30); on aarch64 from the variable ld.so exports,
// __pointer_chk_guard (__pointer_chk_guard_local in a static program).
func pointerGuard(tg *target.Target, mem target.Memory) (uint64, error) {
	if tg.Arch == regs.ARM64 {
		return guardVariable(tg, mem)
	}
	for i := range tg.Contexts {
		c := &tg.Contexts[i]
		if c.Kind != target.KindThread || c.TP == 0 {
			continue
		}
		var b [8]byte
		if mem.ReadMemory(c.TP+0x30, b[:]) == nil {
			return binary.LittleEndian.Uint64(b[:]), nil
		}
	}
	return 0, ErrNoGuard
}

// guardVariable reads aarch64 glibc's pointer guard variable, found by its
// symbol in the mapped objects.
func guardVariable(tg *target.Target, mem target.Memory) (uint64, error) {
	seen := map[*target.Module]bool{}
	for _, m := range tg.Space.Mappings() {
		if m.Module == nil || seen[m.Module] {
			continue
		}
		seen[m.Module] = true
		addr, ok := dataSymbol(m.Module.Path, "__pointer_chk_guard", "__pointer_chk_guard_local")
		if !ok {
			continue
		}
		if g, err := readU64(mem, addr+m.Bias); err == nil {
			return g, nil
		}
	}
	return 0, ErrNoGuard
}

// dataSymbol is the address of the first of names defined as an object
// in the ELF file at path (its symbol table, then its dynamic one).
func dataSymbol(path string, names ...string) (addr uint64, ok bool) {
	fh, _, err := fsafe.Open(path)
	if err != nil {
		return 0, false
	}
	defer fh.Close()
	defer func() {
		if recover() != nil {
			addr, ok = 0, false
		}
	}()
	ef, err := elf.NewFile(fh)
	if err != nil {
		return 0, false
	}
	for _, get := range []func() ([]elf.Symbol, error){ef.Symbols, ef.DynamicSymbols} {
		syms, _ := get()
		for _, n := range names {
			for _, s := range syms {
				if s.Name == n && elf.ST_TYPE(s.Info) == elf.STT_OBJECT && s.Section != elf.SHN_UNDEF {
					return s.Value, true
				}
			}
		}
	}
	return 0, false
}
