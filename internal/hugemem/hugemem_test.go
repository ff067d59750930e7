package hugemem

import (
	"testing"
	"unsafe"
)

func TestBytes(t *testing.T) {
	for _, n := range []int{0, 1, Size - 1, Size, Size + 4096, 3*Size + 1} {
		b := Bytes(n)
		if len(b) != n || cap(b) != n {
			t.Fatalf("Bytes(%d): len %d cap %d", n, len(b), cap(b))
		}
		for i, c := range b {
			if c != 0 {
				t.Fatalf("Bytes(%d)[%d] = %d, want zeroed memory", n, i, c)
			}
		}
		if n >= Size && uintptr(unsafe.Pointer(&b[0]))%Size != 0 {
			t.Errorf("Bytes(%d) starts at %p, not at a huge-page boundary", n, &b[0])
		}
		for i := range b {
			b[i] = byte(i)
		}
	}
}

func TestMap(t *testing.T) {
	for _, n := range []int{0, 1, 4096, Size, 3*Size + 12345} {
		b, err := Map(n)
		if err != nil {
			t.Fatalf("Map(%d): %v", n, err)
		}
		if len(b) != n {
			t.Fatalf("Map(%d): %d bytes", n, len(b))
		}
		if n >= Size && uintptr(unsafe.Pointer(&b[0]))%Size != 0 {
			t.Errorf("Map(%d) starts at %p, not at a huge-page boundary", n, &b[0])
		}
		for i := range b {
			if b[i] != 0 {
				t.Fatalf("Map(%d)[%d] = %d", n, i, b[i])
			}
			b[i] = 1
		}
		if err := Unmap(b); err != nil {
			t.Fatalf("Unmap: %v", err)
		}
	}
}
