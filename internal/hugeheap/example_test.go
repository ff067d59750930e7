package hugeheap_test

import "github.com/rewindstack/rewind/internal/hugeheap"

// A short-lived command about to build tens of megabytes of small objects
// reserves them in huge pages first thing.
func ExampleReserve() {
	hugeheap.Reserve(48 << 20)
	// ... then the command's work, e.g. gcdefer.Until(64 << 20).
	// Output:
}
