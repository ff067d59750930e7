package unwindtable

import (
	"unsafe"
)

// hostLittleEndian reports whether this machine stores integers as the
// table format does (amd64 and arm64 do), so that a persisted table's
// arrays can be used in place.
var hostLittleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// ruleInPlace reports whether Rule is laid out in memory as a persisted
// rule is (20 bytes: seven bytes, a pad byte, three 32-bit offsets).
var ruleInPlace = hostLittleEndian && unsafe.Sizeof(Rule{}) == 20 &&
	unsafe.Offsetof(Rule{}.Flags) == 6 && unsafe.Offsetof(Rule{}.CFAOffset) == 8 &&
	unsafe.Offsetof(Rule{}.RAOffset) == 12 && unsafe.Offsetof(Rule{}.FPOffset) == 16

// viewOf returns p's n elements of T used in place, or nil when they
// cannot be (another byte order, a misaligned p, a Rule laid out
// differently, or nothing to view). T holds no pointers.
func viewOf[T uint16 | uint32 | Rule](p []byte, n int) []T {
	var z T
	size, align := int(unsafe.Sizeof(z)), uintptr(unsafe.Alignof(z))
	if !hostLittleEndian || n == 0 || len(p) != n*size {
		return nil
	}
	if _, isRule := any(z).(Rule); isRule && !ruleInPlace {
		return nil
	}
	at := unsafe.Pointer(unsafe.SliceData(p))
	if uintptr(at)%align != 0 {
		return nil
	}
	return unsafe.Slice((*T)(at), n)
}

// arrayOf returns p's n little-endian integers: in place where viewOf
// can, else decoded into a new slice. p is nil after a reader's error;
// the result is then an empty slice, never used.
func arrayOf[T uint16 | uint32](p []byte, n int, get func([]byte) T) []T {
	if v := viewOf[T](p, n); v != nil {
		return v
	}
	size := int(unsafe.Sizeof(T(0)))
	if len(p) < n*size {
		return make([]T, 0)
	}
	a := make([]T, n)
	for i := range a {
		a[i] = get(p[size*i:])
	}
	return a
}
