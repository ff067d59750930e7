//go:build !linux

package hugemem

func advise(n int) []byte { return make([]byte, n) }

func available() bool { return false }
