//go:build rewind_shadow && (amd64 || arm64)

package gostack

// The two functions below have no body here: the overlay's runtime defines
// them (by linkname, in rewind_shadow_gostack*.go), so a capture is a single
// call into the runtime, which owns the goroutine's shadow stack.

// ShadowCallers is [CallersFP] backed by the goroutine's software shadow
// stack: the same return addresses, with the same meaning of skip (0 is
// ShadowCallers itself, whose entry is then a PC inside it), but a capture
// stops walking frame pointers where it meets the frame whose return address
// holds the runtime's trampoline, and copies the rest from the cache. The
// runtime keeps the cache in step when frames return (the trampoline pops
// one entry and moves itself to the caller's return slot), so later captures
// from deeper or shallower in the same call tree reuse it. An adaptive
// per-goroutine policy caches only stacks deep enough, and backs off when
// returns through the trampoline cost more than the walking they save.
//
// The cache starts at the return slot of the function that entry 0 is in
// (skip 1: the caller of ShadowCallers), so the first return through the
// trampoline is when that function returns.
func ShadowCallers(skip int, pcs []uintptr) int

// ShadowCallersEager is [ShadowCallers] without the adaptive policy: every
// capture caches, like the source article's prototype. For benchmarks and
// tests.
func ShadowCallersEager(skip int, pcs []uintptr) int
