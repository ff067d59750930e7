package stacks_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/fixture"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/output"
	"github.com/rewindstack/rewind/stacks"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// jitSource copies a function into anonymous executable memory, as a JIT
// compiler does (a frame record, then pause(2)), names it in its perf map
// as Node does, and runs it: its thread blocks inside the generated code.
const jitSource = `#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

static const unsigned char code[] = {
	0x55,                         /* push %rbp */
	0x48, 0x89, 0xe5,             /* mov %rsp,%rbp */
	0xb8, 0x22, 0x00, 0x00, 0x00, /* mov $34 (pause),%eax */
	0x0f, 0x05,                   /* syscall */
	0x5d,                         /* pop %rbp */
	0xc3,                         /* ret */
};

__attribute__((noinline)) static void run(void (*f)(void)) { f(); __asm__ volatile(""); }

int main(void) {
	unsigned char *p = mmap(0, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	memcpy(p + 0x40, code, sizeof code);
	char path[64];
	snprintf(path, sizeof path, "/tmp/perf-%d.map", getpid());
	FILE *m = fopen(path, "w");
	fprintf(m, "%lx 10 Builtins_InterpreterEntryTrampoline\n", (unsigned long)p);
	fprintf(m, "%lx %zx JS:*jsHot /app.js:2:15\n", (unsigned long)(p + 0x40), sizeof code);
	fclose(m);
	printf("ready\n");
	fflush(stdout);
	for (;;)
		run((void (*)(void))(p + 0x40));
}
`

// TestJITPerfMap dumps a thread blocked in generated code: its frame is
// named from the process's perf map exactly, marked JIT ("jit": true in
// JSON, [jit] in text), and the walk goes on to the C caller by the frame
// record the generated code keeps.
func TestJITPerfMap(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skipf("no gcc: %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "jit.c")
	os.WriteFile(src, []byte(jitSource), 0o644)
	exe := filepath.Join(dir, "jit")
	if out, err := exec.Command("gcc", "-O2", "-g", "-fno-omit-frame-pointer", "-o", exe, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	proc := fixture.Start(t, exe)
	t.Cleanup(func() { os.Remove(fmt.Sprintf("/tmp/perf-%d.map", proc.PID)) })
	snap, err := live.Capture(proc.PID, live.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tg := snap.Target(&target.Objects{}, func(s string) { t.Log(s) })
	u, _ := unwind.ByName("auto")
	rep := stacks.Unwind(tg, stacks.Options{Unwinder: u}, &symbolize.Symbolizer{Inlines: true})
	if len(rep.Threads) != 1 {
		t.Fatalf("%d threads", len(rep.Threads))
	}
	fs := rep.Threads[0].Frames
	var names []string
	for _, f := range fs {
		names = append(names, f.Name())
	}
	if len(fs) < 3 || fs[0].Function != "JS:*jsHot /app.js:2:15" || !fs[0].JIT || fs[0].Module != "" {
		t.Fatalf("frames %q; want the generated code named from the perf map first, marked JIT: %+v", names, fs)
	}
	if fs[1].Function != "run" && fs[1].Function != "main" {
		t.Errorf("frames %q: the generated code's caller is not the C program's", names)
	}
	var text, js strings.Builder
	output.WriteText(&text, rep)
	output.WriteJSON(&js, rep)
	if !strings.Contains(text.String(), " JS:*jsHot /app.js:2:15+0xb [jit] [") {
		t.Errorf("text has no [jit] frame:\n%s", text.String())
	}
	if !strings.Contains(js.String(), `"jit": true`) || strings.Count(js.String(), `"jit": `) != 1 {
		t.Errorf("JSON: want one \"jit\": true:\n%s", js.String())
	}
}
