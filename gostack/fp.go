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

// fpLevels is how many frame records separate the value getfp returns from
// the frame record of the Go function that called it: 0 when the compiler
// calls the assembly directly, 1 if it goes through an ABI wrapper that has a
// frame of its own. -1 means the probe failed and frame pointers are not used.
var fpLevels = probeLevels()

//go:noinline
func probeFP() (fp unsafe.Pointer, pc uintptr) {
	fp = getfp()
	pc, _, _, _ = runtime.Caller(0)
	return fp, pc
}

// probeLevels finds fpLevels by checking which function the first frame
// record's return address points into.
//
//go:noinline
//go:nocheckptr
func probeLevels() int {
	fp, self := probeFP()
	selfFn := runtime.FuncForPC(self)
	if fp == nil || selfFn == nil {
		return -1
	}
	myPC, _, _, _ := runtime.Caller(0)
	me := runtime.FuncForPC(myPC)
	for level := 0; level < 3 && fp != nil; level++ {
		ret := *(*uintptr)(unsafe.Add(fp, ptrSize))
		f := runtime.FuncForPC(ret - 1)
		if f == nil {
			return -1
		}
		switch f.Entry() {
		case me.Entry():
			// The record at this level is probeFP's own: its return
			// address points into probeLevels.
			return level
		case selfFn.Entry():
			// An ABI wrapper's record returns into probeFP; keep going.
		default:
			return -1
		}
		fp = *(*unsafe.Pointer)(fp)
	}
	return -1
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
	if fpLevels < 0 {
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
	for i := fpLevels; i > 0 && fp != nil; i-- {
		fp = *(*unsafe.Pointer)(fp)
	}
	n := 0
	for fp != nil && n < len(pcs) {
		pc := *(*uintptr)(unsafe.Add(fp, ptrSize))
		if skip > 0 {
			skip--
		} else {
			pcs[n] = pc
			n++
		}
		next := *(*unsafe.Pointer)(fp)
		if uintptr(next) <= uintptr(fp) || uintptr(next)-uintptr(fp) > maxFrameStep {
			break
		}
		fp = next
	}
	return n
}
