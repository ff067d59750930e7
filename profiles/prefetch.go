//go:build amd64 || arm64

package profiles

// prefetch asks the CPU to bring the n bytes at p into its caches
// without waiting for them (a prefetch instruction every 64 bytes). It
// never faults, and does nothing for n <= 0.
//
//go:noescape
func prefetch(p *byte, n int)
