//go:build !linux

package symbolize

// bigBuffer returns a zeroed buffer of n bytes.
func bigBuffer(n uint64) []byte { return make([]byte, n) }
