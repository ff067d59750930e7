//go:build rewind_shadow && !amd64 && !arm64

package gostack

// ShadowCallers is [CallersFP] on this architecture: without frame pointers
// there is no shadow stack.
//
//go:noinline
func ShadowCallers(skip int, pcs []uintptr) int { return CallersFP(skip+1, pcs) }

// ShadowCallersEager is [CallersFP] on this architecture.
//
//go:noinline
func ShadowCallersEager(skip int, pcs []uintptr) int { return CallersFP(skip+1, pcs) }
