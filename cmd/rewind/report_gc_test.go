package main

import (
	"runtime"
	"testing"
)

// TestAnonBytes checks that anonBytes sees the heap grow: it bounds the
// heap for lessGC's restore, which must not miss a large one.
func TestAnonBytes(t *testing.T) {
	before := anonBytes()
	if before <= 0 {
		t.Fatalf("anonBytes = %d", before)
	}
	b := make([]byte, 64<<20)
	for i := range b {
		if i%4096 == 0 {
			b[i] = 1 // touched: resident
		}
	}
	after := anonBytes()
	runtime.KeepAlive(b)
	if after-before < 48<<20 {
		t.Errorf("anonBytes grew %d bytes after 64 MiB was touched (before %d, after %d)", after-before, before, after)
	}
}
