//go:build !amd64 && !arm64

package gostack

import "runtime"

// Supported reports whether this build walks frame pointers. When it is
// false, [Callers] is [runtime.Callers] and [CallersFP] returns logical PCs
// (see [CallersFP]).
const Supported = false

// Callers is [runtime.Callers] on this architecture, which has no frame
// pointers: skip 0 is Callers itself, 1 its caller.
//
//go:noinline
func Callers(skip int, pcs []uintptr) int {
	return runtime.Callers(skip+1, pcs)
}

// CallersFP returns the logical PCs of [runtime.Callers] on this
// architecture (skip 0 is CallersFP itself); [Expand] then only copies them.
//
//go:noinline
func CallersFP(skip int, pcs []uintptr) int {
	return runtime.Callers(skip+1, pcs)
}

// Expand copies phys[skip:] into dst: on this architecture [CallersFP]
// already returns logical PCs.
func Expand(dst []uintptr, phys []uintptr, skip int) int {
	skip = max(skip, 0)
	if skip >= len(phys) {
		return 0
	}
	return copy(dst, phys[skip:])
}

// CacheStats reports the size of the return-address cache, which this
// architecture does not use.
func CacheStats() (entries int, bytes int64) { return 0, 0 }
