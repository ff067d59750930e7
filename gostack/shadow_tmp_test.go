//go:build rewind_shadow

package gostack

import (
	"runtime"
	"testing"
)

//go:noinline
func bestDirect(n int, pcs []uintptr, b *testing.B) {
	if n > 1 {
		bestDirect(n-1, pcs, b)
		return
	}
	ShadowReset()
	b.ResetTimer()
	s := 0
	for range b.N {
		s += runtime.ShadowCallers(0, pcs, false)
	}
	sink += s
}

func BenchmarkTmpDirect(b *testing.B) {
	pcs := make([]uintptr, 1024)
	bestDirect(64, pcs, b)
}
