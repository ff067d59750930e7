// Package target owns what rewind unwinds: a set of contexts (register
// sets: threads, fibers, goroutines, interrupted frames) over one memory
// and one address space (mappings and the modules mapped there).
//
// Every source builds a Target through New, from its own package: a live
// process (live.Snapshot.Target), a core file (corefile.Core.Target), a
// perf sample (profiles.Collector.Target). A new kind of context — the saved
// context of an inactive fiber, a goroutine's gobuf — is one constructor
// that returns Contexts (and, when it copied memory, the Regions that hold
// it) for a Target that already exists. The unwinder (package unwind)
// reads a Context's registers, the Target's Memory and AddressSpace and
// nothing else; the symbolizer (package symbolize) reads Modules.
package target

import (
	"fmt"

	"github.com/rewindstack/rewind/regs"
)

// Kind is what a context is.
type Kind uint8

// Context kinds.
const (
	// KindThread is an OS thread, stopped or as the kernel saved it.
	KindThread Kind = iota
	// KindFiber is an inactive user-space context: a fiber, coroutine or
	// ucontext whose registers were saved in memory by a switch routine.
	KindFiber
	// KindGoroutine is a goroutine that is not running on a thread: its
	// registers are its saved gobuf.
	KindGoroutine
	// KindSignal is a frame interrupted by a signal, from the context the
	// kernel saved.
	KindSignal
)

var kindNames = [...]string{"thread", "fiber", "goroutine", "signal"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// MarshalText implements encoding.TextMarshaler.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// Context is one register set to unwind from.
type Context struct {
	Kind Kind
	// ID identifies the context within its kind when HasID is set: the
	// TID of a thread, a fiber's or a goroutine's id.
	ID    int64
	HasID bool
	// TID is the OS thread the context belongs to or runs on (a thread's
	// own TID, a fiber's cord, a running goroutine's M); 0 when none.
	TID int
	// Name is the thread's comm, the fiber's name; "" when unknown.
	Name string
	// Regs are the registers the walk starts from.
	Regs regs.Regs
	// TP is a thread's thread pointer (fs_base on amd64): its libc TCB.
	// 0 when unknown.
	TP uint64
	// Runtime names what saved a fiber's context ("ucontext",
	// "fcontext", "coro", "jmpbuf", "regs", "tarantool"); Saved is the
	// address of the memory holding that context, 0 when none.
	Runtime string
	Saved   uint64
	// NeverRan marks a fiber created but not started yet: its context is
	// its runtime's start-up frame.
	NeverRan bool
	// Interp are the frames of interpreted languages running on the
	// context (Lua on a Tarantool fiber, Python on a thread), one
	// InterpStack per runtime, so that several can share a thread;
	// outputs show each activation's frames before the native frame of
	// its runtime's entry (InterpStack.Entry), as the runtime's own
	// backtraces do (Splice).
	Interp []InterpStack
	// Mem, when not nil, is the memory this context's walk reads instead
	// of the Target's (a fiber stack copied apart, for example).
	Mem Memory
	// Err is set when the context could not be captured; Regs are then
	// empty and the context is reported, not unwound.
	Err error
	// Stopped says whether a live process's thread was stopped to be
	// read or read in place, blocked in the kernel; StopUnknown for
	// cores and other contexts.
	Stopped StopState
}

// StopState is whether a live thread was stopped to be read.
type StopState uint8

// StopStates.
const (
	StopUnknown    StopState = iota // not a live thread (a core's, a fiber)
	StopStopped                     // stopped (ptrace) while it was read
	StopNotStopped                  // read without being stopped: blocked in the kernel throughout
)

// Thread returns a thread context.
func Thread(tid int, name string, r regs.Regs) Context {
	return Context{Kind: KindThread, ID: int64(tid), HasID: true, TID: tid, Name: name, Regs: r}
}

// Target is everything needed to unwind a set of contexts.
type Target struct {
	// PID is the process, 0 when unknown.
	PID int
	// Source says where the target came from ("core FILE", the live
	// process's executable).
	Source string
	Arch   regs.Arch
	// Contexts are the register sets to unwind.
	Contexts []Context
	Mem      Memory
	Space    *AddressSpace
}

// Config describes a target to New.
type Config struct {
	PID    int
	Source string
	Arch   regs.Arch
	// Mem reads the target's memory.
	Mem Memory
	// Mappings are the address space as the source describes it, in any
	// order; New fills in each mapping's Module and Bias. A "[vdso]"
	// mapping gets its module from VDSO, or else from the image in Mem.
	Mappings []Mapping
	// Objects opens mapped files and caches their unwind tables; nil
	// means a new Objects.
	Objects *Objects
	// VDSO, when not nil, is the vDSO's module (for sources whose memory
	// does not hold the image, such as perf samples).
	VDSO *Module
	// Contexts are the register sets to unwind.
	Contexts []Context
	// Warn receives one line per problem that does not stop the target
	// from being built (a vDSO that cannot be read); it may be nil.
	Warn func(string)
}

// New builds a target: the one constructor every source goes through.
func New(c Config) *Target {
	objs := c.Objects
	if objs == nil {
		objs = &Objects{}
	}
	maps := make([]Mapping, len(c.Mappings))
	copy(maps, c.Mappings)
	for i := range maps {
		m := &maps[i]
		if m.Path != VDSOPath || m.Module != nil {
			continue
		}
		mod := c.VDSO
		if mod == nil && c.Mem != nil {
			var err error
			if mod, err = ReadVDSO(c.Mem, m.Start, m.End, objs); err != nil && c.Warn != nil {
				c.Warn(err.Error())
			}
		}
		if mod != nil && mod.File != nil {
			if b, err := mod.File.Bias(m.Start, m.Offset); err == nil {
				m.Module, m.Bias = mod, b
			}
		}
	}
	ctxs := make([]Context, len(c.Contexts))
	copy(ctxs, c.Contexts)
	return &Target{
		PID:      c.PID,
		Source:   c.Source,
		Arch:     c.Arch,
		Contexts: ctxs,
		Mem:      c.Mem,
		Space:    NewAddressSpace(maps, objs),
	}
}

// Memory returns the memory a context's walk reads.
func (t *Target) Memory(c *Context) Memory {
	if c.Mem != nil {
		return c.Mem
	}
	return t.Mem
}

// Threads returns the thread contexts, in order.
func (t *Target) Threads() []Context {
	var out []Context
	for _, c := range t.Contexts {
		if c.Kind == KindThread {
			out = append(out, c)
		}
	}
	return out
}

// InvalidName is an interpreted frame's Function when the runtime's
// memory held no valid name for it (not a string object of its type, too
// long, not UTF-8, control characters): text shows it, JSON has null.
const InvalidName = "<invalid name>"

// InterpFrame is a frame of an interpreted language (see Context.Interp).
type InterpFrame struct {
	Function, File string
	Line           int
	// Method names where the frame came from ("lua", "python").
	Method string
	// ParenLocation writes the frame's location in parentheses in text,
	// as the runtime's own tools print it (output.Frame.ParenLocation).
	ParenLocation bool
	// Activation is the interpreter entry (the native frame of function
	// InterpStack.Entry, counted from the innermost) that runs the
	// frame: 0 for the innermost. Python runs a thread's frames in
	// several evaluation-loop activations; Lua frames are all 0.
	Activation int
	// Anchor, when not 0, is an address on the native stack inside the
	// frame of the activation's entry function (Python 3.12+: the entry
	// frame the evaluation loop keeps among its locals): outputs place
	// the frame above the native frame whose stack holds it, which needs
	// no symbol.
	Anchor uint64
}
