//go:build amd64 || arm64

package prefetch

// lines prefetches the n bytes at p, 64 at a time.
//
//go:noescape
func lines(p *byte, n int)
