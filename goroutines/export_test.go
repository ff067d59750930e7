package goroutines

// KeptStacks reports how many stacks of the set's goroutines were taken
// from the read made before the pause (see parkedSince).
func KeptStacks(s *Set) int { return s.kept }
