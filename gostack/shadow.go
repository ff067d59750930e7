//go:build rewind_shadow

package gostack

import "runtime"

// This file exists only in builds with the rewind_shadow tag, which need the
// runtime overlay written by `rewind goshadow overlay` (package goshadow):
//
//	go build -overlay=DIR/overlay.json -tags rewind_shadow

// ShadowStats reports the calling goroutine's shadow stack: frames cached
// now, and how many times a frame returned through the trampoline.
func ShadowStats() (cached, hits int) { return runtime.ShadowStats() }

// ShadowReset empties the calling goroutine's shadow stack, restoring the
// return slot that holds the trampoline.
func ShadowReset() { runtime.ShadowReset() }
