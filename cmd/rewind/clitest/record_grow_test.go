package clitest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/perftest"
)

// deepSrc recurses 500 deep (about 56 KB of stack at -O1) and spins there
// for the number of seconds of CPU time given as its argument: CPU time,
// not wall time, so that a loaded machine still gives the recording the
// samples the test counts on (cpu-clock samples only a running thread).
const deepSrc = `
#include <stdlib.h>
#include <time.h>
volatile long sink;
static double secs;
static double now(void) { struct timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec / 1e9; }
__attribute__((noinline)) long deep(int n) {
	char pad[64];
	pad[n % 64] = (char)n;
	if (n == 0) { double end = now() + secs; long s = 0; while (now() < end) for (int i = 0; i < 100000; i++) s += i; return s; }
	return deep(n - 1) + pad[(n * 7) % 64];
}
int main(int argc, char **argv) { secs = argc > 1 ? atof(argv[1]) : 1; sink = deep(500); return 0; }
`

// TestRecordGrowsStackCopy (issue 13.7): a process whose stacks are deeper
// than the default 16 KB copy gets a larger copy while it is recorded, up
// to the kernel's 65528 bytes, and its later samples reach main; an
// explicit --stack-size is kept.
func TestRecordGrowsStackCopy(t *testing.T) {
	perftest.RequirePerfEvent(t)
	dir := t.TempDir()
	src, exe := filepath.Join(dir, "deep.c"), filepath.Join(dir, "deep")
	if err := os.WriteFile(src, []byte(deepSrc), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O1", "-g", "-fomit-frame-pointer", "-o", exe, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	out := filepath.Join(dir, "p.folded")
	_, errOut, code := run(t, "record", "--unwind-in", "user", "-F", "199", "-o", out, "--", exe, "3.5")
	if code != 0 {
		t.Fatalf("record: exit %d\n%s", code, errOut)
	}
	if !strings.Contains(errOut, "copying 32768 bytes per sample") || !strings.Contains(errOut, "copying 65528 bytes per sample") {
		t.Errorf("the stack copy did not grow to 65528 bytes:\n%s", errOut)
	}
	// The samples before the copy grew ended at its edge; the table says
	// so, and that a larger --stack-size would not help now.
	if !strings.Contains(errOut, "ended at the stack copy's edge (the copy grew to 65528 bytes") {
		t.Errorf("the fidelity table does not say the copy grew to the kernel's most:\n%s", errOut)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	complete, total := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		stack, n := line, 1
		if i := strings.LastIndexByte(line, ' '); i > 0 {
			stack = line[:i]
			n = atoiOr(line[i+1:], 1)
		}
		total += n
		if strings.Contains(stack, ";main;deep;") {
			complete += n
		}
	}
	// The first two seconds are recorded with smaller copies.
	if total == 0 || complete*5 < total {
		t.Errorf("%d of %d samples reach main after the copy grew\n%s", complete, total, errOut)
	}
	_, errOut, code = run(t, "record", "--unwind-in", "user", "-q", "-F", "199", "--stack-size", "16384", "-o", out, "--", exe, "2")
	if code != 0 || strings.Contains(errOut, "bytes per sample") {
		t.Errorf("--stack-size 16384: exit %d, the copy grew anyway:\n%s", code, errOut)
	}
}

func atoiOr(s string, def int) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return def
		}
		n = n*10 + int(c-'0')
	}
	return n
}
