// Package gostack captures the calling goroutine's stack in-process, walking
// frame pointers instead of the runtime's table-driven unwinder.
//
// Go code on amd64 and arm64 keeps a frame pointer in every frame that calls
// something: the frame pointer register points at a two-word record holding
// the caller's frame pointer and this frame's return address. The runtime's
// execution tracer walks that chain; [runtime.Callers] does not, and pays a
// pclntab search for every frame. This package offers three entry points:
//
//   - [Callers] has the exact contract of [runtime.Callers]: the same PCs (so
//     [runtime.CallersFrames] yields the same frames, inlined ones included)
//     and the same meaning of skip (logical frames, inlined ones counted).
//     Inlined frames are expanded from a process-wide cache that maps a
//     return address to its logical PCs, filled on first sight of a PC.
//   - [CallersFP] is the cheaper physical variant: return addresses only, one
//     per physical frame, like the runtime's tracer records them.
//   - [Expand] turns a physical stack from [CallersFP] into exactly what
//     [runtime.Callers] would have returned, for callers that store stacks
//     and symbolize rarely.
//
// # When gostack falls back to runtime.Callers
//
// [Callers] calls [runtime.Callers] instead of trusting frame pointers when:
//
//   - the architecture is not amd64 or arm64 (there are no frame pointers);
//   - the walk reaches a return address that is not Go code (C code of a cgo
//     program, or an unknown PC);
//   - the walk reaches runtime.cgocallback (Go called back from C: the frames
//     above it belong to the cgo machinery, and runtime.Callers can symbolize
//     C frames through a registered cgo symbolizer);
//   - the walk reaches a call the runtime injected into a goroutine:
//     runtime.sigpanic (a fault turned into a panic: the "return address" is
//     the faulting PC, and on arm64 a frameless leaf that faulted has no frame
//     record), runtime.asyncPreempt or a debugger's runtime.debugCallV2;
//   - the walk reaches a function that only runs on a system (g0) stack or
//     switches stacks (runtime.systemstack, runtime.mcall, runtime.morestack,
//     runtime.mstart, runtime.rt0_go, runtime.asmcgocall, runtime.gogo);
//   - a frame pointer does not point above the previous one (within 1 GiB, the
//     largest Go stack), which would mean the chain is broken.
//
// Go code called from assembly that has no frame pointer is NOT detected:
// the amd64 and arm64 assemblers give every assembly function that calls
// another function a frame record unless it is declared NOFRAME, and a
// NOFRAME assembly function that calls Go code hides its caller from any
// frame-pointer walk (the runtime's execution tracer has the same blind spot).
// Such frames are missing from the result of [Callers] and [CallersFP].
//
// # Cost and memory
//
// A capture costs one frame-pointer step per physical frame, plus, for
// [Callers] and [Expand], one hash-table probe per return address. The cache
// holds every return address seen, for the life of the process (there is no
// eviction: the number of call sites in the binary bounds it). An ordinary
// frame (no inlined frames, not a wrapper, not a special runtime function)
// costs one 16-byte table slot, which with the table between 3/8 and 3/4 full
// (it doubles at 3/4) is 21 to 43 bytes per return address; other frames add
// a 32-byte entry and 8 bytes per logical PC. [CacheStats] reports the
// current size. The first capture through a return address costs a few
// pclntab look-ups for it.
//
// # Runtime internals
//
// One runtime function is reached by linkname, because expanding inlined
// frames needs the pclntab inline tree and the function IDs the runtime uses
// to hide wrapper frames, neither of which any exported API gives for a
// single PC: runtime.pprof_fpunwindExpand, which the runtime exports (it is a
// "push" linkname, so the linker allows the reference) for runtime/pprof's
// own frame-pointer stacks. It runs only when a return address is seen for
// the first time; the result is cached.
//
// The frame pointer is read by a two-instruction assembly function per
// architecture (fp_amd64.s, fp_arm64.s).
package gostack
