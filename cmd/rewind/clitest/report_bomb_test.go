package clitest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/testutil/perfbomb"
)

// TestReportBomb runs rewind report, under a 2 GiB address-space limit,
// on perf.data files of less than 1 MB whose compressed records expand to
// 4 GiB of --call-graph dwarf samples, and to 1 GiB of -g ones: the
// report stays under 400 MB of memory (its peak resident set), writes
// the profile of the records up to the expansion limit and says where it
// stopped and why.
func TestReportBomb(t *testing.T) {
	for _, b := range []struct {
		kind   perfbomb.Kind
		expand int64
	}{{perfbomb.Dwarf, 4 << 30}, {perfbomb.Tiny, 1 << 30}} {
		dir := t.TempDir()
		data := filepath.Join(dir, "bomb.data")
		res, err := perfbomb.Write(data, perfbomb.Options{Kind: b.kind, Expand: b.expand})
		if err != nil {
			t.Fatal(err)
		}
		if res.Size > 1<<20 {
			t.Fatalf("the bomb is %d bytes", res.Size)
		}
		out := filepath.Join(dir, "out.folded")
		msg, code, rss := runPeakRSS(t, "prlimit", "--as=2147483648", "--", rewindBin, "report", "-q", "-o", out, data)
		if code != 1 || !strings.Contains(msg, "rewind report: perfdata: "+data+": offset 0x") || !strings.Contains(msg, "the compressed records expand past") {
			t.Errorf("kind %d: exit %d, want 1 and the expansion limit's error; stderr:\n%s", b.kind, code, msg)
		}
		if rss > 400<<20 {
			t.Errorf("kind %d: peak RSS %d MB", b.kind, rss>>20)
		}
		folded, err := os.ReadFile(out)
		if err != nil || !strings.HasSuffix(string(folded), " "+strconv.Itoa(128<<20/res.RecordSize)+"\n") {
			t.Errorf("kind %d: the profile: %q (%v)", b.kind, folded, err)
		}
		t.Logf("kind %d: %d-byte file expanding to %d bytes: peak RSS %d MB", b.kind, res.Size, b.expand, rss>>20)
	}
}

// TestReportManySamples runs rewind report, under a 2 GiB address-space
// limit, on a 5 MB perf.data file of perf record -z -g samples as dense
// as a recording of a program spinning in one loop makes them (200 Ki
// records a MiB: their times and periods differ, their stacks do not),
// a million of them: what report keeps does not grow with the samples
// (it folds those with the same stack), so it stays under 400 MB, and
// the expansion limit, which counts the records' bytes, does not cut
// such a recording short.
func TestReportManySamples(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "dense.data")
	res, err := perfbomb.Write(data, perfbomb.Options{Kind: perfbomb.Tiny, Expand: 64 << 20, Noise: 4})
	if err != nil {
		t.Fatal(err)
	}
	if perMiB := res.Records << 20 / res.DataSize; perMiB < 160<<10 {
		t.Fatalf("the file holds %d records a MiB, want more", perMiB)
	}
	out := filepath.Join(dir, "out.folded")
	stderr, code, rss := runPeakRSS(t, "prlimit", "--as=2147483648", "--", rewindBin, "report", "-q", "-o", out, data)
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	if rss > 400<<20 {
		t.Errorf("peak RSS %d MB", rss>>20)
	}
	folded, err := os.ReadFile(out)
	if err != nil || !strings.HasSuffix(string(folded), " "+strconv.FormatInt(res.Records, 10)+"\n") {
		t.Errorf("the profile: %q (%v), want %d samples", folded, err, res.Records)
	}
	t.Logf("%d-byte file of %d samples: peak RSS %d MB", res.Size, res.Records, rss>>20)
}

// runPeakRSS runs a command and returns its standard error, its exit
// status and its peak resident set size in bytes, as GNU time measures
// it. The command's own rusage (ProcessState.SysUsage) is no measure: Go
// starts commands with vfork, and at exec the kernel carries the test
// process's high-water RSS into the command's, so a test process that has
// grown makes every command look as large. GNU time forks, so what its
// child reports is the child's own.
func runPeakRSS(t *testing.T, name string, args ...string) (stderr string, code int, rss int64) {
	stderr, code, rss, _ = runPeakMemory(t, name, args...)
	return stderr, code, rss
}

// runPeakMemory is runPeakRSS that also polls the measured program's
// RssAnon (anonymous memory, what a report's bound is about: the pages of
// a file it maps come and go with the kernel's reclaim) every
// millisecond while it runs and returns its highest value.
func runPeakMemory(t *testing.T, name string, args ...string) (stderr string, code int, rss, anon int64) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "rss")
	cmd := exec.Command("/usr/bin/time", append([]string{"-f", "%M", "-o", out, name}, args...)...)
	var e strings.Builder
	cmd.Stderr = &e
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	peak := make(chan int64)
	go func() {
		var max int64
		children := fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid)
		for {
			select {
			case <-done:
				peak <- max
				return
			case <-time.After(time.Millisecond):
			}
			b, _ := os.ReadFile(children)
			for _, pid := range strings.Fields(string(b)) {
				if kb := statusKB(pid, "RssAnon:"); kb<<10 > max {
					max = kb << 10
				}
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	anon = <-peak
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("GNU time wrote no measure: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	kb, err := strconv.ParseInt(lines[len(lines)-1], 10, 64)
	if err != nil {
		t.Fatalf("GNU time wrote %q", b)
	}
	return e.String(), cmd.ProcessState.ExitCode(), kb << 10, anon
}

// statusKB reads one "Name:  N kB" line of /proc/PID/status; 0 when the
// process is gone.
func statusKB(pid, field string) int64 {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == field {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// TestReportLargeFileMemory runs rewind report on a 640 MB perf.data file
// of --call-graph dwarf samples, not compressed (perf record without -z),
// 79,500 of them: the report unwinds the samples while it reads the file
// and releases the part of its mapping it has consumed, so its anonymous
// memory stays under the 200 MB a report may take whatever the file's
// size, and its whole resident set (the file's pages too) far below the
// file's size (read whole, the file alone was 640 MB of it).
func TestReportLargeFileMemory(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "large.data")
	res, err := perfbomb.Write(data, perfbomb.Options{Kind: perfbomb.Dwarf, Expand: 640 << 20, Raw: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Size < 640<<20 {
		t.Fatalf("the file is %d bytes", res.Size)
	}
	out := filepath.Join(dir, "out.folded")
	stderr, code, rss, anon := runPeakMemory(t, rewindBin, "report", "-q", "-o", out, data)
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	if anon > 200<<20 {
		t.Errorf("peak RssAnon %d MB for a %d MB file, want at most 200 MB", anon>>20, res.Size>>20)
	}
	if anon == 0 || rss > res.Size/2 {
		t.Errorf("peak RSS %d MB (anonymous %d MB) for a %d MB file: the file was not released as it was read", rss>>20, anon>>20, res.Size>>20)
	}
	folded, err := os.ReadFile(out)
	if err != nil || !strings.HasSuffix(string(folded), " "+strconv.FormatInt(res.Records, 10)+"\n") {
		t.Errorf("the profile: %q (%v), want %d samples", folded, err, res.Records)
	}
	t.Logf("%d MB file of %d samples: peak RssAnon %d MB, peak RSS %d MB", res.Size>>20, res.Records, anon>>20, rss>>20)
}
