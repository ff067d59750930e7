package hugeheap_test

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/hugeheap"
)

// anonHuge returns the process's anonymous memory in huge pages, in KiB.
func anonHuge(t *testing.T) int {
	f, err := os.Open("/proc/self/smaps_rollup")
	if err != nil {
		t.Skipf("no /proc/self/smaps_rollup: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "AnonHugePages:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	t.Skip("smaps_rollup has no AnonHugePages")
	return 0
}

// TestReserve checks that small objects allocated after Reserve land in
// huge pages where the kernel gives them on request (THP "madvise").
func TestReserve(t *testing.T) {
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil || !strings.Contains(string(mode), "[madvise]") {
		t.Skipf("transparent huge pages are not in madvise mode (%q, %v): nothing to ask for", mode, err)
	}
	before := anonHuge(t)
	hugeheap.Reserve(32 << 20)
	// 16 MB of small objects, as a dump's parsing makes them.
	keep := make([][]byte, 0, 1<<12)
	for i := 0; i < 1<<12; i++ {
		b := make([]byte, 4000)
		b[0], b[len(b)-1] = 1, 1
		keep = append(keep, b)
	}
	after := anonHuge(t)
	runtime.KeepAlive(keep)
	// At least a third of them in huge pages (the kernel may lack free
	// 2 MB pages for some).
	if after-before < 16<<10/3 {
		t.Errorf("AnonHugePages grew by %d KiB for 16 MB of objects, want at least %d", after-before, 16<<10/3)
	}
}
