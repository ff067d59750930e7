package clitest

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/perfbomb"
)

// TestReportManyStacksMemory runs rewind report on an 80 MB perf.data
// file (not compressed) of 1.3 million -g samples spread over 250,000
// threads: a profile of 250,000 distinct stacks (one per thread), which
// is what a report keeps and grows with. Written as pprof, the bench's
// format, its anonymous memory stays under the 200 MB a report may take.
// (A 2 GB system-wide recording beside a build had 209,126 distinct
// stacks in 241,901 samples.)
func TestReportManyStacksMemory(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "threads.data")
	res, err := perfbomb.Write(data, perfbomb.Options{Kind: perfbomb.Tiny, Expand: 80 << 20, Raw: true, Threads: 250000})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.pb.gz")
	stderr, code, _, anon := runPeakMemory(t, rewindBin, "report", "-o", out, data)
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	if anon > 200<<20 {
		t.Errorf("peak RssAnon %d MB for %d samples of 250,000 threads, want at most 200 MB", anon>>20, res.Records)
	}
	if want := fmt.Sprintf("(%d samples)", res.Records); !strings.Contains(stderr, want) {
		t.Errorf("stderr does not say %s:\n%s", want, stderr)
	}
	t.Logf("%d MB file of %d samples of 250,000 threads: peak RssAnon %d MB", res.Size>>20, res.Records, anon>>20)
}
