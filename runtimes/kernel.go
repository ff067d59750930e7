package runtimes

import "github.com/rewindstack/rewind/target"

// Kernel is a runtime whose frames the kernel walk (package bpfunwind)
// follows: its part of the BPF program, named after the runtime
// (Runtime.Name), records with each stack the runtime's frames as
// (code object, check word, offset) triples, which user space names
// afterwards. bpfunwind finds the runtime through the registry, by this
// interface, and names no runtime itself.
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

// KernelFrame is one interpreted frame as the kernel walk recorded it;
// what each word holds is the runtime part's own.
type KernelFrame struct {
	// Code is the frame's code object (or function).
	Code uint64
	// Check is a word read beside Code that tells whether the object at
	// that address is still the one that ran (a freed object's memory
	// is reused).
	Check uint64
	// Off is the frame's offset in its code (or the part's own datum).
	Off uint32
	// Flags are the part's own.
	Flags uint16
	// Act is the native activation running the frame, 0 the innermost.
	Act int
}

// KernelProcess is a runtime's per-process part of the kernel walk.
type KernelProcess interface {
	// Value is the process's entry in the program part's process map:
	// a pointer to the runtime's mirror of the part's C structure.
	Value() any
	// Adopt takes over what old, the reader of the same process
	// described before, has read when old reads the same interpreter
	// (reporting so: the thread states told to the program stay good),
	// and closes old either way.
	Adopt(old KernelProcess) bool
	// ThreadStates maps each thread that runs the runtime to its
	// thread state's address, for the part's thread map (nil for a part
	// that keeps none).
	ThreadStates() (map[int]uint64, error)
	// EntryPCs are the address ranges of the interpreter's entry code in
	// the process, for an interpreter whose entry function has no symbol
	// (nil: placed by Entry's name).
	EntryPCs() []target.PCRange
	// Frames names a recorded stack's frames, innermost first; why, when
	// not "", says why the walk stopped early, and acts is how many
	// activations the native stack showed.
	Frames(fs []KernelFrame, why string, acts int) []target.InterpFrame
	// Close releases the process's memory.
	Close()
}

// KernelRefresh is a KernelProcess whose Value may change after the
// process was described: an interpreter state made after its library
// was mapped (a LuaJIT state the process creates later). The unwinder
// calls Refresh when the program asks for the process's threads again
// and after every read, and writes Value again when it reports true.
type KernelRefresh interface {
	Refresh() bool
}
