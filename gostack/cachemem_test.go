package gostack

import (
	"runtime"
	"testing"
)

// TestCacheMemory runs every equivalence scenario on an empty cache and
// reports how much the return-address cache holds afterwards.
func TestCacheMemory(t *testing.T) {
	if !Supported {
		t.Skipf("no cache on %s", runtime.GOARCH)
	}
	resetCache()
	for _, sc := range scenarios() {
		if err := sc.run(func() error { return inlinedA(hereDefault) }); err != nil {
			t.Fatalf("%s: %v", sc.name, err)
		}
	}
	entries, bytes := CacheStats()
	if entries == 0 || bytes == 0 {
		t.Fatalf("CacheStats = %d entries, %d bytes after capturing", entries, bytes)
	}
	t.Logf("cache after all scenarios: %d return addresses, %d bytes (%.1f bytes each, table slots included)",
		entries, bytes, float64(bytes)/float64(entries))
	if per := bytes / int64(entries); per > 1024 {
		t.Errorf("%d bytes per cached return address", per)
	}
}
