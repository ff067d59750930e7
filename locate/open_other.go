//go:build !linux

package locate

const nonblock = 0
