//go:build !linux

package hugeheap

// Reserve does nothing where huge pages cannot be asked for.
func Reserve(n int) {}
