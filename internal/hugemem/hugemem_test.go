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
