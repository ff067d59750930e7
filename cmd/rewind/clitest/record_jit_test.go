package clitest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/fixture"
)

// TestRecordJITPerfMap records a program running generated code named in
// its perf map: most samples are named from the map exactly, as perf
// report names them. (User mode only so far: the kernel walk's profile
// holds no anonymous mappings yet, and its walk ends at such code.)
func TestRecordJITPerfMap(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("running as uid %d: recording is tested as root (CAP_PERFMON or kernel.perf_event_paranoid <= 2 would do)", os.Geteuid())
	}
	exe := fixture.BuildC(t, fixture.JITSource)
	dir := t.TempDir()
	defer fixture.RemovePerfMaps()
	for _, mode := range []string{"user"} {
		t.Run(mode, func(t *testing.T) {
			folded := filepath.Join(dir, mode+".folded")
			_, stderr, code := fixture.Run(t, rewindBin, "record", "--unwind-in", mode, "-F", "499", "-o", folded, "--", exe, "spin", "3")
			if code != 0 {
				t.Fatalf("record exited %d:\n%s", code, stderr)
			}
			b, err := os.ReadFile(folded)
			if err != nil {
				t.Fatal(err)
			}
			total, named := 0, 0
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				i := strings.LastIndexByte(l, ' ')
				var n int
				fmt.Sscan(l[i+1:], &n)
				total += n
				if strings.Contains(l, ";"+fixture.JITName) {
					named += n
				}
			}
			if total < 50 || named*10 < total*9 {
				t.Errorf("%d of %d samples named from the perf map, want 90%%:\n%s\n%s", named, total, b, stderr)
			}
		})
	}
}
