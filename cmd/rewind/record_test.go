package main

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/rewindstack/rewind/internal/testutil/perftest"
)

// readelfBuildID returns the GNU build-id readelf -n prints for path.
func readelfBuildID(t *testing.T, path string) string {
	out, err := exec.Command("readelf", "-n", path).Output()
	if err != nil {
		t.Skipf("readelf: %v", err)
	}
	m := regexp.MustCompile(`Build ID: ([0-9a-f]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no build-id in readelf -n %s", path)
	}
	return string(m[1])
}

// TestRecordPprof records the fixture into a pprof file, opens it with
// go tool pprof, and checks the mapping's build-id against readelf and the
// inlined frames pprof lists.
func TestRecordPprof(t *testing.T) {
	perftest.RequirePerfEvent(t)
	exe := perftest.BuildCPU(t, "-fomit-frame-pointer")
	out := filepath.Join(t.TempDir(), "cpu.pb.gz")
	if err := runRecord([]string{"-F", "499", "-q", "-o", out, "--", exe, "0.7", "2"}); err != nil {
		t.Fatal(err)
	}
	top, err := exec.Command("go", "tool", "pprof", "-top", out).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof -top: %v\n%s", err, top)
	}
	for _, want := range []string{"hash_block", "level2", "start_thread", "main"} {
		if !strings.Contains(string(top), want) {
			t.Errorf("go tool pprof -top does not list %s:\n%s", want, top)
		}
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	if p.Mapping[0].File != exe || p.Mapping[0].BuildID != readelfBuildID(t, exe) {
		t.Errorf("main mapping %s build-id %q, want %s %s", p.Mapping[0].File, p.Mapping[0].BuildID, exe, readelfBuildID(t, exe))
	}
	inlined := 0
	for _, l := range p.Location {
		if len(l.Line) > 1 {
			inlined++
		}
	}
	if inlined == 0 {
		t.Errorf("no location has inlined frames (libc's msort_with_tmp is inlined into its .part copy)")
	}
}

// TestRecordFoldedAcrossExec records a shell that execs the fixture: the
// mappings are replaced at the exec and the program's stacks still unwind
// to their roots.
func TestRecordFoldedAcrossExec(t *testing.T) {
	perftest.RequirePerfEvent(t)
	exe := perftest.BuildCPU(t, "-fomit-frame-pointer")
	out := filepath.Join(t.TempDir(), "cpu.folded")
	if err := runRecord([]string{"-F", "499", "-q", "-o", out, "--", "/bin/sh", "-c", "sleep 0.1; exec " + exe + " 0.5 1"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	checkHashBlockStacks(t, b)
}

// checkHashBlockStacks checks folded stacks of the CPU fixture: they are
// folded stack lines, and at least 99% of the samples in hash_block have
// their whole stack, up to main or the thread's worker.
func checkHashBlockStacks(t *testing.T, folded []byte) {
	t.Helper()
	line := regexp.MustCompile(`^[^;\n]+(;[^;\n]+)* \d+$`)
	total, complete := 0, 0
	for _, l := range strings.Split(strings.TrimSpace(string(folded)), "\n") {
		if !line.MatchString(l) {
			t.Fatalf("not a folded stack line: %q", l)
		}
		n, _ := strconv.Atoi(l[strings.LastIndexByte(l, ' ')+1:])
		if strings.Contains(l, ";hash_block") {
			total += n
			if strings.Contains(l, ";main;burn;") || strings.Contains(l, ";worker;burn;") {
				complete += n
			}
		}
	}
	if total < 10 || complete < total*99/100 {
		t.Errorf("%d of %d hash_block samples have their full stack", complete, total)
	}
}

// TestReportTruncated cuts a perf.data file inside its data:
// rewind report writes the profile of the records before the cut and
// returns an error saying the file is truncated.
func TestReportTruncated(t *testing.T) {
	perf := perftest.RequirePerf(t)
	exe := perftest.BuildCPU(t, "-fomit-frame-pointer")
	dir := t.TempDir()
	data := filepath.Join(dir, "perf.data")
	if out, err := exec.Command(perf, "record", "-q", "-e", "cpu-clock", "-F", "499", "--call-graph", "dwarf,4096",
		"-o", data, "--", exe, "0.5", "1").CombinedOutput(); err != nil {
		t.Skipf("perf record cannot run here: %v\n%s", err, out)
	}
	b, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	// Cut three quarters into the data section (the header's data
	// offset and size): with few samples, as on a loaded machine, the
	// feature sections after it can be more than the file's last quarter.
	dataOff := binary.LittleEndian.Uint64(b[40:])
	dataSize := binary.LittleEndian.Uint64(b[48:])
	cut := filepath.Join(dir, "cut.data")
	if err := os.WriteFile(cut, b[:dataOff+dataSize*3/4], 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "cut.folded")
	err = runReport([]string{"-q", "-o", out, cut})
	if err == nil || !strings.Contains(err.Error(), "truncated") || !strings.Contains(err.Error(), cut) {
		t.Errorf("report of a truncated file: %v", err)
	}
	// The records before the cut are in the profile. (Whether their
	// stacks have names depends on whether the cut spared the mappings'
	// records, which perf writes per CPU, not in time order.)
	folded, rerr := os.ReadFile(out)
	if rerr != nil || !regexp.MustCompile(`(?m) \d+$`).Match(folded) {
		t.Errorf("partial profile not written: %v\n%s", rerr, folded)
	}
	// Cut inside the first record: no sample, so no (empty) profile.
	if err := os.WriteFile(cut, b[:dataOff+4], 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.folded")
	if err := runReport([]string{"-q", "-o", empty, cut}); err == nil || !strings.Contains(err.Error(), "no profile written") {
		t.Errorf("report of a file cut before its first sample: %v", err)
	}
	if _, err := os.Stat(empty); err == nil {
		t.Errorf("an empty profile was written for a file cut before its first sample")
	}
	if err := runReport([]string{"-q", "-o", out, filepath.Join(dir, "missing.data")}); err == nil {
		t.Error("report of a missing file succeeded")
	}
	if err := os.WriteFile(cut, []byte("not a perf file at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := runReport([]string{"-q", "-o", out, cut}); err == nil || !strings.Contains(err.Error(), "not a perf.data file") {
		t.Errorf("report of garbage: %v", err)
	}
}

func TestRecordErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"-p", "1", "--", "true"},
		{"-o", "x.txt", "--", "true"},
		{"-p", "999999999"},
		{"--method", "magic", "--", "true"},
		{"--stack-size", "65536", "--", "true"},
	} {
		if err := runRecord(args); err == nil {
			t.Errorf("rewind record %q succeeded", args)
		}
	}
	if err := runReport([]string{"-o", "x.txt", "perf.data"}); err == nil || !strings.Contains(err.Error(), "unknown format") {
		t.Errorf("report -o x.txt: %v", err)
	}
}

// TestRecordPIDUntilExit attaches to a running program without -d: the
// recording ends when the program exits, and the profile is written.
func TestRecordPIDUntilExit(t *testing.T) {
	perftest.RequirePerfEvent(t)
	exe := perftest.BuildCPU(t, "-fomit-frame-pointer")
	prog := exec.Command(exe, "1", "1")
	if err := prog.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- prog.Wait() }()
	out := filepath.Join(t.TempDir(), "pid.folded")
	// Reaping the child here lets rewind see it gone rather than a zombie.
	// (--unwind-in user: loading the BPF unwinder takes longer than
	// this process lives on a loaded machine.)
	if err := runRecord([]string{"--unwind-in", "user", "-F", "499", "-q", "-o", out, "-p", strconv.Itoa(prog.Process.Pid)}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil || !strings.Contains(string(b), ";burn;level1;level2;hash_block ") {
		t.Errorf("profile of the exited process: %v\n%s", err, b)
	}
}

// TestRecordProgressOnTerminal runs the rewind binary under script(1),
// which gives it a terminal: the progress line (samples, lost, elapsed)
// is printed and erased before the summary.
func TestRecordProgressOnTerminal(t *testing.T) {
	perftest.RequirePerfEvent(t)
	scriptCmd, err := exec.LookPath("script")
	if err != nil {
		t.Skip("script(1) from util-linux is not installed")
	}
	exe := perftest.BuildCPU(t, "-fomit-frame-pointer")
	dir := t.TempDir()
	rewind := filepath.Join(dir, "rewind")
	if out, err := exec.Command("go", "build", "-o", rewind, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	line := rewind + " record -F 99 -q -o " + filepath.Join(dir, "p.folded") + " -- " + exe + " 0.8 1"
	out, err := exec.Command(scriptCmd, "-qfec", line, "/dev/null").CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%q", line, err, out)
	}
	if !regexp.MustCompile(`\rrewind: \d+ samples, 0 lost, \d+\.\ds`).Match(out) || !strings.Contains(string(out), "\r\x1b[K") {
		t.Errorf("no progress line on the terminal:\n%q", out)
	}
}

// TestRecordUnwindsAsItGoes makes the recorder unwind batches during the
// recording (as a long one does): every stack must still be complete.
func TestRecordUnwindsAsItGoes(t *testing.T) {
	perftest.RequirePerfEvent(t)
	exe := perftest.BuildCPU(t, "-fomit-frame-pointer")
	defer func(old int) { pendingLimit = old }(pendingLimit)
	pendingLimit = 1
	out := filepath.Join(t.TempDir(), "inc.folded")
	if err := runRecord([]string{"-F", "499", "-q", "-o", out, "--", exe, "2.6", "1"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	total, complete := 0, 0
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		n, _ := strconv.Atoi(l[strings.LastIndexByte(l, ' ')+1:])
		total += n
		if strings.Contains(l, ";_start;") || strings.Contains(l, ";clone3;") {
			complete += n
		}
	}
	if total < 10 || complete < total*99/100 {
		t.Errorf("%d of %d stacks complete", complete, total)
	}
}

// TestReportCopyEdgeHint: when perf record's stack copies were too small
// for the stacks, report says how to record more (perf record's option;
// report has no --stack-size) (issue 13 item 7).
func TestReportCopyEdgeHint(t *testing.T) {
	perf := perftest.RequirePerf(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "deep.c")
	exe := filepath.Join(dir, "deep")
	prog := `volatile long sink;
__attribute__((noinline)) long deep(int n) {
	char pad[64];
	pad[n % 64] = (char)n;
	if (n == 0) { long s = 0; for (long i = 0; i < 200000000; i++) s += i; return s; }
	return deep(n - 1) + pad[(n * 7) % 64];
}
int main(void) { sink = deep(500); return 0; }
`
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O1", "-g", "-o", exe, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	data := filepath.Join(dir, "d.data")
	if out, err := exec.Command(perf, "record", "-q", "-e", "cpu-clock", "-F", "499", "--call-graph", "dwarf,4096", "-o", data, "--", exe).CombinedOutput(); err != nil {
		t.Skipf("perf record cannot run here: %v\n%s", err, out)
	}
	_, stderr, code := run(t, "report", "-o", filepath.Join(dir, "d.folded"), data)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "at the stack copy's edge (perf record --call-graph dwarf,65528") {
		t.Errorf("the copy-edge line does not say how to record more:\n%s", stderr)
	}
}

// TestReportCompressed reports a file recorded with perf record -z (its
// records compressed with Zstandard): the stacks unwind to their roots as
// they do from a plain file.
func TestReportCompressed(t *testing.T) {
	perf := perftest.RequirePerf(t)
	exe := perftest.BuildCPU(t, "-fomit-frame-pointer")
	dir := t.TempDir()
	data := filepath.Join(dir, "perf.data")
	if out, err := exec.Command(perf, "record", "-q", "-z", "-e", "cpu-clock", "-F", "499", "--call-graph", "dwarf",
		"-o", data, "--", exe, "0.5", "1").CombinedOutput(); err != nil {
		t.Skipf("perf record -z cannot run here: %v\n%s", err, out)
	}
	out := filepath.Join(dir, "z.folded")
	if err := runReport([]string{"-q", "-o", out, data}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	checkHashBlockStacks(t, b)
}
