//go:build amd64 || arm64

package gostack

import (
	"runtime"
	"sync/atomic"
	"unsafe"
)

// fallbacks counts the calls of Callers that used runtime.Callers.
var fallbacks atomic.Int64

// Callers fills pcs with the return program counters of function
// invocations on the calling goroutine's stack and returns how many it
// wrote, with the contract of [runtime.Callers]: skip is the number of
// logical frames to skip before recording (inlined frames count), with 0
// identifying the frame for Callers itself and 1 the caller of Callers. The
// PCs are those [runtime.Callers] would return from the same place (except
// for the frame of Callers itself, which is a PC in gostack.Callers instead
// of runtime.Callers), so [runtime.CallersFrames] turns them into the same
// functions, files and lines.
//
// Callers walks frame pointers and expands inlined frames from a cache
// keyed by return address; the first capture through a given return address
// fills its cache entry (a pclntab look-up). It falls back to
// [runtime.Callers] in the cases listed in the package documentation.
//
//go:noinline
func Callers(skip int, pcs []uintptr) int {
	if len(pcs) == 0 {
		return 0
	}
	if skip < 0 {
		skip = 0 // as runtime.Callers: a negative skip skips nothing
	}
	if fpOK {
		if n, ok := walkCallers(skip, pcs); ok {
			return n
		}
	}
	fallbacks.Add(1)
	// runtime.Callers' skip 0 is runtime.Callers itself, 1 is this
	// function: shift by one so that skip keeps its meaning.
	return runtime.Callers(skip+1, pcs)
}

// walkCallers does the frame-pointer walk for Callers. Its own frame record
// holds the return address into Callers, which is logical frame 0 (Callers
// is never inlined). It returns ok false when Callers must fall back.
//
// The walk may call fill, which may grow (and so move) the stack: fp is an
// unsafe.Pointer, which the runtime adjusts when it copies the stack, and
// the frame records it points to are adjusted the same way.
//
//go:noinline
//go:norace
//go:nocheckptr
func walkCallers(skip int, pcs []uintptr) (n int, ok bool) {
	fp := getfp()
	if skip > 0 && fp != nil {
		// Logical frame 0 is Callers itself: one physical frame, no
		// inlined frames, not a wrapper. Skip it without a look-up.
		next := *(*unsafe.Pointer)(fp)
		if uintptr(next)-uintptr(fp)-1 >= maxFrameStep {
			return 0, next == nil
		}
		fp = next
		skip--
	}
	t := cacheTab.Load()
	keys, vals, shift := unsafe.Pointer(unsafe.SliceData(t.keys)), unsafe.Pointer(unsafe.SliceData(t.vals)), t.shift
	identity := unsafe.Pointer(identityEntry)
	panicCallee := false
	for fp != nil {
		pc := *(*uintptr)(unsafe.Add(fp, ptrSize))
		// The common cases, inlined by hand: pc is in its home slot,
		// nothing is being skipped, and pc is an ordinary frame
		// (identityEntry) or one with inlined frames and no other rule.
		// h < len(keys) because shift is 64 - log2(len(keys)).
		h := uintptr(uint64(pc)*0x9E3779B97F4A7C15) >> shift
		if skip == 0 && !panicCallee && atomic.LoadUintptr((*uintptr)(unsafe.Add(keys, h*ptrSize))) == pc {
			v := atomic.LoadPointer((*unsafe.Pointer)(unsafe.Add(vals, h*ptrSize)))
			if v == identity {
				pcs[n] = pc
				n++
			} else if e := (*entry)(v); e != nil && e.flags&^flagInnermostHidden == 0 && len(e.pcs) < len(pcs)-n {
				// (e is nil for pc 0, which matches a free slot.)
				// Inlined frames and nothing else special, and
				// room for all of them and more.
				for _, l := range e.pcs {
					pcs[n] = l
					n++
				}
			} else {
				goto general
			}
			if n == len(pcs) {
				return n, true
			}
			next := *(*unsafe.Pointer)(fp)
			if uintptr(next)-uintptr(fp)-1 >= maxFrameStep {
				return n, next == nil
			}
			fp = next
			continue
		}
	general:
		e := t.lookup(pc)
		if e == nil {
			e = fill(pc)
			t = cacheTab.Load()
			keys, vals, shift = unsafe.Pointer(unsafe.SliceData(t.keys)), unsafe.Pointer(unsafe.SliceData(t.vals)), t.shift
		}
		flags := e.flags
		switch {
		case flags == flagIdentity:
			// The common case: a physical frame without inlined
			// frames and nothing special about its function.
			if skip > 0 {
				skip--
			} else {
				pcs[n] = pc
				n++
				if n == len(pcs) {
					return n, true
				}
			}
			panicCallee = false
		case flags&flagUntrusted != 0:
			return n, false
		default:
			if panicCallee && flags&flagInnermostHidden != 0 {
				// The runtime shows a wrapper that called a panic
				// function; the cached expansion hides it.
				if skip > 0 {
					skip--
				} else {
					pcs[n] = pc
					n++
					if n == len(pcs) {
						return n, true
					}
				}
			}
			if flags&flagIdentity != 0 {
				if skip > 0 {
					skip--
				} else {
					pcs[n] = pc
					n++
					if n == len(pcs) {
						return n, true
					}
				}
			}
			for _, l := range e.pcs {
				if skip > 0 {
					skip--
					continue
				}
				pcs[n] = l
				n++
				if n == len(pcs) {
					return n, true
				}
			}
			if flags&flagTop != 0 {
				return n, true
			}
			panicCallee = flags&flagPanicCallee != 0
		}
		next := *(*unsafe.Pointer)(fp)
		if uintptr(next)-uintptr(fp)-1 >= maxFrameStep {
			// nil ends the stack; anything else is a broken chain.
			return n, next == nil
		}
		fp = next
	}
	return n, true
}

// Expand writes into dst the logical PCs that [runtime.Callers] would have
// returned for the physical stack phys (as produced by [CallersFP]), after
// skipping skip logical frames (inlined frames count, hidden wrapper frames
// do not), and returns how many it wrote. phys must come from this process:
// it is read through this binary's pclntab.
//
// Expand stops after runtime.goexit, the top of a goroutine stack, as
// [runtime.Callers] does. A PC outside Go code is kept as is. A frame above
// runtime.sigpanic holds the faulting PC rather than a return address and is
// expanded as [runtime.Callers] expands it (on arm64, a frameless leaf
// function that faulted is missing from phys itself, and so from the result).
//
// Expand uses the same cache as [Callers]; it is safe for concurrent use.
//
//go:nocheckptr
func Expand(dst []uintptr, phys []uintptr, skip int) int {
	if skip < 0 {
		skip = 0
	}
	if !fpOK {
		// CallersFP returned logical PCs already.
		if skip >= len(phys) {
			return 0
		}
		return copy(dst, phys[skip:])
	}
	n := 0
	panicCallee, sigpanic := false, false
	t := cacheTab.Load()
	keys, vals, shift := unsafe.Pointer(unsafe.SliceData(t.keys)), unsafe.Pointer(unsafe.SliceData(t.vals)), t.shift
	identity := unsafe.Pointer(identityEntry)
	for _, pc := range phys {
		if n == len(dst) {
			break
		}
		// The common cases, as in walkCallers.
		h := uintptr(uint64(pc)*0x9E3779B97F4A7C15) >> shift
		if skip == 0 && !panicCallee && !sigpanic && atomic.LoadUintptr((*uintptr)(unsafe.Add(keys, h*ptrSize))) == pc {
			v := atomic.LoadPointer((*unsafe.Pointer)(unsafe.Add(vals, h*ptrSize)))
			if v == identity {
				dst[n] = pc
				n++
				continue
			}
			if e := (*entry)(v); e != nil && e.flags&^flagInnermostHidden == 0 && len(e.pcs) <= len(dst)-n {
				for _, l := range e.pcs {
					dst[n] = l
					n++
				}
				continue
			}
		}
		if sigpanic {
			// The runtime looks the faulting instruction itself up,
			// not the one before it, and reports faulting PC + 1.
			pc++
		}
		e := t.lookup(pc)
		if e == nil {
			e = fill(pc)
			t = cacheTab.Load()
			keys, vals, shift = unsafe.Pointer(unsafe.SliceData(t.keys)), unsafe.Pointer(unsafe.SliceData(t.vals)), t.shift
		}
		flags := e.flags
		if flags == flagIdentity {
			if skip > 0 {
				skip--
			} else {
				dst[n] = pc
				n++
			}
			panicCallee, sigpanic = false, false
			continue
		}
		if panicCallee && flags&flagInnermostHidden != 0 {
			if skip > 0 {
				skip--
			} else {
				dst[n] = pc
				n++
			}
		}
		if flags&flagIdentity != 0 {
			if skip > 0 {
				skip--
			} else if n < len(dst) {
				dst[n] = pc
				n++
			}
		}
		for _, l := range e.pcs {
			if n == len(dst) {
				break
			}
			if skip > 0 {
				skip--
				continue
			}
			dst[n] = l
			n++
		}
		if flags&flagTop != 0 {
			break
		}
		panicCallee = flags&flagPanicCallee != 0
		sigpanic = flags&flagSigpanic != 0
	}
	return n
}
