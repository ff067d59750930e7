package main

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestAnonBytes checks that anonBytes sees anonymous memory grow: it
// bounds the heap for lessGC's restore, which must not miss a large one.
// The memory is mapped afresh rather than allocated from Go's heap, which
// may hand out pages an earlier test left resident (go test -count=2).
func TestAnonBytes(t *testing.T) {
	before := anonBytes()
	if before <= 0 {
		t.Fatalf("anonBytes = %d", before)
	}
	b, err := unix.Mmap(-1, 0, 64<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(b)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1 // touched: resident
	}
	after := anonBytes()
	if after-before < 48<<20 {
		t.Errorf("anonBytes grew %d bytes after 64 MiB was touched (before %d, after %d)", after-before, before, after)
	}
}
