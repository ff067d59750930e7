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

// ShadowStackID returns an ID for the calling goroutine's stack, as
// ShadowCallers(skip, ...) would capture it but without truncation: equal
// stacks get the same ID, different stacks different ones, in every
// goroutine, for the life of the process. [StackPCs] turns it back into the
// return addresses. skip has ShadowCallers' meaning. It returns 0 for an
// empty stack (skip beyond the root) and if the process has interned more
// than 2^28 distinct stack frames.
//
// It is built on the shadow stack: each cached frame carries the ID of the
// stack from it to the root, so when the stack above the caller is cached
// and unchanged since the last call the ID costs O(1), and otherwise
// O(frames walked above the cache), one hash-table look-up each. With
// nothing cached the stack is walked and looked up whole, as the runtime's
// execution tracer does.
func ShadowStackID(skip int) uint64

// StackPCs writes the return addresses of the stack with the given ID
// (from [ShadowStackID]), innermost first, into pcs and returns how many it
// wrote: at most len(pcs), and 0 for an ID that ShadowStackID never
// returned.
func StackPCs(id uint64, pcs []uintptr) int
