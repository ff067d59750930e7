package goruntime

// The Go runtime's functions that move a thread between stacks: a Go
// thread runs runtime code on its system stack (g0) and user code on
// goroutine stacks, and these functions' unwind information describes
// only the stack they were entered on. Every unwinder of rewind (package
// unwind's walk of stack copies and dumps, the BPF walk of package
// bpfunwind, the profiles' reading of where a stack ends) takes them from
// this one table; how each one crosses is the unwinder's own (package
// unwind's goSwitch explains it).

// SwitchKind is what a runtime function does to the stack.
type SwitchKind uint8

const (
	// NoSwitch: an ordinary function.
	NoSwitch SwitchKind = iota
	// Systemstack: runtime.systemstack calls a function on g0 and
	// returns; the calling goroutine's state is in its g.sched (sp, bp)
	// while it runs, and its frame pointer survives the switch.
	Systemstack
	// Mcall: runtime.mcall switches to g0 for good, leaving the
	// goroutine (parked, exiting, preempted) and clearing the frame
	// pointer: Go's traceback ends a g0 stack there.
	Mcall
	// Morestack: runtime.morestack saves the goroutine's registers in
	// its g.sched (pc, sp, bp, lr), clears the frame pointer and calls
	// runtime.newstack on g0, which resumes the goroutine at g.sched.
	Morestack
	// FPSwitch: functions that switch stacks with the frame pointer
	// leading back: those that move to g0's stack around a vDSO call
	// (their frame record stays on the goroutine stack) and gogo, which
	// loads a goroutine's saved SP and BP and jumps to its PC.
	FPSwitch
	// Sigreturn: the runtime's signal restorer (rt_sigreturn).
	Sigreturn
	// Clone: the runtime's clone, where a new thread starts.
	Clone
)

// Switch is one stack-switching function of the runtime.
type Switch struct {
	// Name is the function's name; symbol tables name the assembly
	// ones with ".abi0" too (Names), pcln tables without it.
	Name string
	Kind SwitchKind
}

// Switches are the runtime's stack-switching functions.
var Switches = []Switch{
	{"runtime.systemstack", Systemstack},
	{"runtime.mcall", Mcall},
	{"runtime.morestack", Morestack},
	{"runtime.nanotime1", FPSwitch},
	{"runtime.walltime", FPSwitch},
	{"runtime.walltime1", FPSwitch},
	{"time.now", FPSwitch},
	{"runtime.vgetrandom1", FPSwitch},
	{"gogo", FPSwitch},
	{"runtime.gogo", FPSwitch},
	{"runtime.sigreturn__sigaction", Sigreturn},
	{"runtime.clone", Clone},
}

// Names returns the names a symbol table may give s: its name and, for the
// runtime's assembly functions, the name with ".abi0".
func (s Switch) Names() [2]string { return [2]string{s.Name, s.Name + ".abi0"} }

// SwitchOf returns the kind of the function named name (as a symbol or
// pcln table names it, ".abi0" or not).
func SwitchOf(name string) SwitchKind {
	if n := len(name) - len(".abi0"); n > 0 && name[n:] == ".abi0" {
		name = name[:n]
	}
	for _, s := range Switches {
		if s.Name == name {
			return s.Kind
		}
	}
	return NoSwitch
}
