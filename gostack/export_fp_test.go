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
