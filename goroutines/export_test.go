package goroutines

import "time"

// KeptStacks reports how many stacks of the set's goroutines were taken
// from the read made before the pause (see parkedSince).
func KeptStacks(s *Set) int { return s.kept }

// CopyCost reports the part of a live capture's pause spent copying the
// goroutines: its wall time and this process's user and system CPU time
// over it.
func CopyCost(s *Set) (wall, user, sys time.Duration) {
	return s.copyCost.wall, s.copyCost.user, s.copyCost.sys
}

// ReadAgain reports whether the read in the pause compared the goroutines
// with the read made just before it (readAgain).
func ReadAgain(s *Set) bool { return s.again }

// Kept reports whether the stack of goroutine g was taken from the read
// made before the pause.
func Kept(g *Goroutine) bool { return g.g != nil && g.g.kept }

// SetAfterPreRead makes Capture call f between its read before the pause
// and the pause; it returns what undoes that.
func SetAfterPreRead(f func()) (restore func()) {
	afterPreRead = f
	return func() { afterPreRead = nil }
}

// SetLeaveAsleep turns leaving threads asleep on or off; it returns what
// undoes that.
func SetLeaveAsleep(on bool) (restore func()) {
	was := leaveAsleep
	leaveAsleep = on
	return func() { leaveAsleep = was }
}
