//go:build !amd64 && !arm64

package profiles

// prefetch does nothing where rewind has no prefetch instruction for the
// architecture (see prefetch.go).
func prefetch(p *byte, n int) {}
