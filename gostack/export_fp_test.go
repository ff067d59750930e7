//go:build amd64 || arm64

package gostack

func fallbacksSoFar() int64 { return fallbacks.Load() }

func fpUsable() bool { return fpOK }

// resetCache empties the return-address cache so that the next captures
// fill it again.
func resetCache() {
	cacheMu.Lock()
	defer cacheMu.Unlock()
	cacheTab.Store(newTable(initialSlots))
	cacheBytes.Store(0)
}

func setFillHook(f func()) { testHookFill = f }

// plainPC reports whether Expand treats pc like the runtime's
// frame-pointer expansion does (no panic, sigpanic or top-of-stack rule).
func plainPC(pc uintptr) bool {
	return lookupOrFill(pc).flags&(flagPanicCallee|flagSigpanic|flagTop) == 0
}

// runtimeExpand is the runtime's own expansion (pprof_fpunwindExpand).
func runtimeExpand(dst, phys []uintptr, skip int) int {
	src := append([]uintptr{uintptr(skip)}, phys...)
	return fpunwindExpand(dst, src)
}
