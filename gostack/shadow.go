//go:build rewind_shadow

package gostack

import "runtime"

// This file exists only in builds with the rewind_shadow tag, which need the
// runtime overlay written by `rewind goshadow overlay` (package goshadow):
//
//	go build -overlay=DIR/overlay.json -tags rewind_shadow

// ShadowCallers is [CallersFP] backed by the goroutine's software shadow
// stack: the same return addresses, with the same meaning of skip, but a
// capture stops walking frame pointers where it meets a frame whose return
// address it cached earlier, and copies the rest. The runtime keeps the cache
// in step when frames return (a trampoline in one return slot), so later
// captures from deeper or shallower in the same call tree reuse it. An
// adaptive per-goroutine policy uses the cache only for stacks deep enough
// and workloads where returns through the trampoline cost less than the
// walking they save.
//
//go:noinline
func ShadowCallers(skip int, pcs []uintptr) int {
	// Physical frame 0 is this function: the runtime's first entry is the
	// return address into it.
	return runtime.ShadowCallers(skip, pcs, true)
}

// ShadowCallersEager is [ShadowCallers] without the adaptive policy: every
// capture caches and patches the frame just above its caller, as the source
// article's prototype did. For benchmarks and tests.
//
//go:noinline
func ShadowCallersEager(skip int, pcs []uintptr) int {
	return runtime.ShadowCallers(skip, pcs, false)
}

// ShadowStats reports the calling goroutine's shadow stack: frames cached
// now, and how many times a frame returned through the trampoline.
func ShadowStats() (cached, hits int) { return runtime.ShadowStats() }

// ShadowReset empties the calling goroutine's shadow stack.
func ShadowReset() { runtime.ShadowReset() }
