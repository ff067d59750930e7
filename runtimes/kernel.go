package runtimes

import "github.com/rewindstack/rewind/target"

// Kernel is a runtime whose frames the kernel walk (package bpfunwind)
// follows: its part of the BPF program records, with each stack, the
// runtime's frames as (code object, name, offset) keys, which user
// space names afterwards. bpfunwind finds the runtime through the
// registry, by this interface, and names no runtime itself.
type Kernel interface {
	Runtime
	// Entry is the native function each of whose frames runs one
	// activation of the runtime's frames (target.InterpStack.Entry).
	Entry() string
	// KernelProcess finds the runtime in process pid, whose mappings
	// are maps, for the kernel walk: nil when the process does not run
	// it (or the walk cannot follow it); the error, when not nil, is the
	// one line that says why its frames will be missing.
	KernelProcess(pid int, maps []target.Mapping) (KernelProcess, error)
}

// KernelProcess is a runtime's per-process part of the kernel walk.
type KernelProcess interface {
	// Value is the process's entry in the program's process map: a
	// pointer to the runtime's mirror of the program's C structure.
	Value() any
	// Adopt takes over what old, the reader of the same process
	// described before, has read when old reads the same interpreter
	// (reporting so: the thread states told to the program stay good),
	// and closes old either way.
	Adopt(old KernelProcess) bool
	// ThreadStates maps each thread that runs the runtime to its
	// thread state's address, for the program's thread map.
	ThreadStates() (map[int]uint64, error)
	// NewStack is called before the frames of each recorded stack are
	// named: what is kept of the process may be bounded there.
	NewStack()
	// Frame names a recorded frame: code object code whose name was
	// name when it ran, at offset off, in activation act; show is false
	// for a frame the runtime itself would not show.
	Frame(code, name uint64, off uint32, act int) (f target.InterpFrame, show bool)
	// Cut is the frame that ends a stack whose walk stopped early, for
	// the reason why, in activation act.
	Cut(why string, act int) target.InterpFrame
	// Close releases the process's memory.
	Close()
}
