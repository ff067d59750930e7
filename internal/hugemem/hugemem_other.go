//go:build !linux

package hugemem

func advise(n int) []byte { return make([]byte, n) }
