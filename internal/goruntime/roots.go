package goruntime

import (
	"sort"
	"strings"

	"github.com/rewindstack/rewind/target"
)

// RootKind says what a thread-root function is.
type RootKind uint8

// Root kinds.
const (
	// NotRoot: an ordinary function.
	NotRoot RootKind = iota
	// ThreadEntry: the first function of a thread (the program's _start,
	// the clone/clone3 wrappers a new thread starts in): nothing above it
	// is a frame.
	ThreadEntry
	// GoTopFrame: a function Go's own traceback ends a stack at (its
	// assembly marks them TOPFRAME: runtime.goexit for goroutines,
	// runtime.mstart and runtime.rt0_go for the g0 stacks), or one of
	// the entry trampolines that jump to runtime.rt0_go from the ELF
	// entry point of a Go program linked internally (_rt0_amd64_linux,
	// then _rt0_amd64), where the word at the stack pointer is argc.
	// Below it is no caller, only what the stack or clone left there.
	GoTopFrame
	// StartFunction: a function a complete stack passes through just
	// below its entry (libc's program and thread start functions).
	StartFunction
)

// rootFunctions are the functions a complete stack ends in, by kind.
// Assembly functions of the Go runtime carry the .abi0 suffix in the
// symbol table.
var rootFunctions = map[string]RootKind{
	"_start": ThreadEntry, "clone": ThreadEntry, "__clone": ThreadEntry,
	"clone3": ThreadEntry, "__clone3": ThreadEntry, "__clone_internal": NotRoot,
	// glibc's makecontext makes a context return into __start_context,
	// which switches to uc_link or exits: the root of a ucontext fiber.
	"__start_context": ThreadEntry,
	// boost.context's make_fcontext plants its own trampoline as the
	// return address of a new fcontext's entry function.
	"make_fcontext":     ThreadEntry,
	"__libc_start_main": StartFunction, "__libc_start_main_impl": StartFunction,
	"__libc_start_call_main": StartFunction, "start_thread": StartFunction,
	"runtime.goexit": GoTopFrame, "runtime.goexit.abi0": GoTopFrame,
	"runtime.mstart": GoTopFrame, "runtime.mstart.abi0": GoTopFrame,
	"runtime.rt0_go": GoTopFrame, "runtime.rt0_go.abi0": GoTopFrame,
	"_rt0_amd64_linux": GoTopFrame, "_rt0_amd64": GoTopFrame,
	"_rt0_arm64_linux": GoTopFrame, "_rt0_arm64": GoTopFrame,
}

// Root returns the root kind of a function (a symbol name, with or
// without a symbol version such as @@GLIBC_2.34).
func Root(function string) RootKind {
	if at := strings.IndexByte(function, '@'); at > 0 {
		function = function[:at]
	}
	return rootFunctions[function]
}

// IsRoot reports whether function is one a complete thread stack ends in
// (any kind but NotRoot).
func IsRoot(function string) bool { return Root(function) != NotRoot }

// RootRange is the extent of a root function in a module, in the
// object's own addresses.
type RootRange struct {
	Start, End uint64
	Kind       RootKind
	// Planted marks a function whose first byte a context-switch
	// library stores as a return address (makecontext's
	// __start_context, boost's make_fcontext): a caller frame whose
	// return address is that byte is the root, although the byte
	// before it belongs to another function.
	Planted bool
}

// plantedReturns are the root functions whose start is planted as a
// return address.
var plantedReturns = map[string]bool{"__start_context": true, "make_fcontext": true}

var rootsKey = target.NewMemoKey()

// RootRanges returns the extents of the thread-entry and Go top-frame
// functions in a module (StartFunctions are not included: stacks
// continue above them), from the symbol tables of its separate debug file
// in elfobj.DefaultDebugDir when it has one (glibc's __clone3 is a local
// symbol), else its own. It is computed once per module.
func RootRanges(mod *target.Module) []RootRange {
	if mod == nil || mod.File == nil {
		return nil
	}
	return mod.Memo(rootsKey, findRoots).([]RootRange)
}

func findRoots(mod *target.Module) any {
	// One table: the separate debug file's when there is one (its
	// .symtab has every name, __clone3 included), as the symbolizer
	// uses. The names are looked up without building the table.
	f := mod.File
	if df := mod.DebugFile(); df != nil {
		f = df
	}
	var names []string
	for name, kind := range rootFunctions {
		if kind == ThreadEntry || (kind == GoTopFrame && mod.File.Go) {
			names = append(names, name)
		}
	}
	sort.Strings(names) // a deterministic choice among aliases
	ext, _ := f.FunctionExtents(names)
	var out []RootRange
	seen := map[uint64]bool{}
	goTop := false
	for _, name := range names {
		if e, ok := ext[name]; ok && e.End > e.Start && !seen[e.Start] {
			seen[e.Start] = true
			kind := rootFunctions[name]
			goTop = goTop || kind == GoTopFrame
			out = append(out, RootRange{Start: e.Start, End: e.End, Kind: kind, Planted: plantedReturns[name]})
		}
	}
	if !goTop && mod.File.Go {
		// A stripped Go program (-ldflags=-s) has no symbol table, but
		// its pcln table names every function (assembly ones without
		// ".abi0").
		if gt := TableOf(mod); gt != nil {
			var goNames []string
			for _, name := range names {
				if rootFunctions[name] == GoTopFrame && !strings.HasSuffix(name, ".abi0") {
					goNames = append(goNames, name)
				}
			}
			ext := gt.Extents(goNames)
			for _, name := range goNames {
				if e, ok := ext[name]; ok && e[1] > e[0] && !seen[e[0]] {
					seen[e[0]] = true
					out = append(out, RootRange{Start: e[0], End: e[1], Kind: GoTopFrame})
				}
			}
		}
	}
	return out
}
