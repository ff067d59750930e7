//go:build !linux

package hugemem

func advise(n int) []byte { return make([]byte, n) }

func available() bool { return false }

func mapAnon(n int) ([]byte, error) { return make([]byte, n), nil }

func unmapAnon([]byte) error { return nil }
