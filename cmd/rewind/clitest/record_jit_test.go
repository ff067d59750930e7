package clitest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/fixture"
)

// jitSpinSource copies a busy loop into anonymous executable memory, as a
// JIT compiler does (with a frame record), names it in its perf map as
// Node does, and runs it for argv[1] seconds.
const jitSpinSource = `#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>

static const unsigned char code[] = {
	0x55,                         /* push %rbp */
	0x48, 0x89, 0xe5,             /* mov %rsp,%rbp */
	0xb9, 0x00, 0x00, 0x00, 0x01, /* mov $0x1000000,%ecx */
	0xff, 0xc9,                   /* 1: dec %ecx */
	0x75, 0xfc,                   /* jnz 1b */
	0x5d,                         /* pop %rbp */
	0xc3,                         /* ret */
};

__attribute__((noinline)) static void run(void (*f)(void)) { f(); __asm__ volatile(""); }

int main(int argc, char **argv) {
	unsigned char *p = mmap(0, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	memcpy(p + 0x80, code, sizeof code);
	char path[64];
	snprintf(path, sizeof path, "/tmp/perf-%d.map", getpid());
	FILE *m = fopen(path, "w");
	fprintf(m, "%lx %zx JS:*jsHot /app.js:2:15\n", (unsigned long)(p + 0x80), sizeof code);
	fclose(m);
	time_t end = time(0) + atoi(argv[1]);
	while (time(0) < end)
		run((void (*)(void))(p + 0x80));
	return 0;
}
`

// TestRecordJITPerfMap records a program running generated code named in
// its perf map: most samples are named from the map exactly, as perf
// report names them. (User mode only so far: the kernel walk's profile
// holds no anonymous mappings yet, and its walk ends at such code.)
func TestRecordJITPerfMap(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("running as uid %d: recording is tested as root (CAP_PERFMON or kernel.perf_event_paranoid <= 2 would do)", os.Geteuid())
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skipf("no gcc: %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "jitspin.c")
	os.WriteFile(src, []byte(jitSpinSource), 0o644)
	exe := filepath.Join(dir, "jitspin")
	if out, err := exec.Command("gcc", "-O2", "-fno-omit-frame-pointer", "-o", exe, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	for _, mode := range []string{"user"} {
		t.Run(mode, func(t *testing.T) {
			folded := filepath.Join(dir, mode+".folded")
			_, stderr, code := fixture.Run(t, rewindBin, "record", "--unwind-in", mode, "-F", "499", "-o", folded, "--", exe, "2")
			if code != 0 {
				t.Fatalf("record exited %d:\n%s", code, stderr)
			}
			defer removePerfMaps()
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
				if strings.Contains(l, ";JS:*jsHot /app.js:2:15") {
					named += n
				}
			}
			if total < 200 || named*10 < total*9 {
				t.Errorf("%d of %d samples named from the perf map, want 90%%:\n%s\n%s", named, total, b, stderr)
			}
		})
	}
}

// removePerfMaps removes the perf maps the recorded programs left.
func removePerfMaps() {
	maps, _ := filepath.Glob("/tmp/perf-*.map")
	for _, m := range maps {
		b, err := os.ReadFile(m)
		if err == nil && strings.Contains(string(b), "JS:*jsHot /app.js:2:15") && strings.Count(string(b), "\n") == 1 {
			os.Remove(m)
		}
	}
}
