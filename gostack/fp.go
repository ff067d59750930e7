//go:build amd64 || arm64

package gostack

import (
	"runtime"
	"unsafe"
)

// Supported reports whether this build walks frame pointers. When it is
// false, [Callers] is [runtime.Callers] and [CallersFP] returns logical PCs
// (see [CallersFP]).
const Supported = true

const ptrSize = unsafe.Sizeof(uintptr(0))

// maxFrameStep bounds the distance between two consecutive frame records:
// no Go stack is larger than 1 GiB on 64-bit systems.
const maxFrameStep = 1 << 30

// getfp returns the frame pointer register of its caller (fp_*.s).
//
// It is declared as returning unsafe.Pointer, not uintptr, on purpose: a
// pointer into the goroutine stack held in a pointer-typed variable is
// adjusted by the runtime when the stack is copied to a larger one, so a walk
// that calls a function (and so may grow the stack) stays valid.
func getfp() unsafe.Pointer

// fpOK reports whether getfp, called from a Go function, returns that
// function's own frame record, as it does when the compiler calls the
// assembly directly (an ABI wrapper with a frame would make it return the
// wrapper's record, which is gone once getfp's caller looks at it). It is
// checked once at start-up; when false, frame pointers are not used.
var fpOK = probeFP() == 0

// probeFP checks, while its own frame is live, which function the return
// address of the frame record getfp returned points into: probeFP's caller
// means the record is probeFP's own (0); anything else is -1.
//
//go:noinline
//go:nocheckptr
func probeFP() int {
	fp := getfp()
	self, _, _, ok1 := runtime.Caller(0)
	caller, _, _, ok2 := runtime.Caller(1)
	selfFn, callerFn := runtime.FuncForPC(self), runtime.FuncForPC(caller)
	if fp == nil || !ok1 || !ok2 || selfFn == nil || callerFn == nil {
		return -1
	}
	ret := *(*uintptr)(unsafe.Add(fp, ptrSize))
	f := runtime.FuncForPC(ret - 1)
	if f == nil || f.Entry() != callerFn.Entry() || f.Entry() == selfFn.Entry() {
		return -1
	}
	return 0
}

// CallersFP fills pcs with one return address per physical frame of the
// calling goroutine, walking frame pointers, and returns how many it wrote.
//
// skip counts physical frames: 0 is CallersFP itself, 1 the function that
// called CallersFP, and so on. Entry i is the return address of the call
// that physical frame skip+i was executing, that is the address of the
// instruction just after that call, exactly the value [runtime.Callers]
// stores for the innermost logical frame of that physical frame. For skip 0
// entry 0 is a PC inside CallersFP. Inlined frames are not expanded (a
// function inlined into its caller shares the caller's physical frame), and
// wrapper frames that [runtime.Callers] hides are still present: pass the
// result to [Expand] to get exactly what [runtime.Callers] would return.
// On a goroutine started with the go statement the last entry is in
// runtime.goexit.
//
// CallersFP trusts the frame-pointer chain like the runtime's execution
// tracer does; it only stops when a frame pointer is nil or does not point
// above the previous one. It does not detect the situations listed in the
// package documentation in which [Callers] falls back; [Expand] still
// produces the right frames for a stack that went through a panic caused by a
// fault (runtime.sigpanic).
//
// When [Supported] is false, or the frame-pointer probe failed at start-up,
// CallersFP returns the logical PCs of [runtime.Callers] instead (and [Expand]
// copies them): the pair then still equals [runtime.Callers], only slower.
//
//go:noinline
func CallersFP(skip int, pcs []uintptr) int {
	if !fpOK {
		return fallbackFP(skip, pcs)
	}
	return walkFP(skip, pcs)
}

//go:noinline
func fallbackFP(skip int, pcs []uintptr) int {
	// Skip fallbackFP and CallersFP themselves, then count the rest as
	// runtime.Callers would.
	return runtime.Callers(skip+2, pcs)
}

// walkFP does the walk for CallersFP: its own frame record holds the return
// address into CallersFP, which is physical frame 0.
//
//go:noinline
//go:norace
//go:nocheckptr
func walkFP(skip int, pcs []uintptr) int {
	fp := getfp()
	for ; skip > 0 && fp != nil; skip-- {
		next := *(*unsafe.Pointer)(fp)
		if uintptr(next)-uintptr(fp)-1 >= maxFrameStep {
			// nil, not above fp, or too far: the chain ends.
			return 0
		}
		fp = next
	}
	if fp == nil {
		return 0
	}
	for n := range pcs {
		pcs[n] = *(*uintptr)(unsafe.Add(fp, ptrSize))
		next := *(*unsafe.Pointer)(fp)
		if uintptr(next)-uintptr(fp)-1 >= maxFrameStep {
			return n + 1
		}
		fp = next
	}
	return len(pcs)
}
