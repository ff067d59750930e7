//go:build !linux

package dump

// threadID returns 0: scheduling classes are set on Linux only.
func threadID() int { return 0 }

// setIdle does nothing and reports false.
func setIdle(tid int, idle bool) bool { return false }
