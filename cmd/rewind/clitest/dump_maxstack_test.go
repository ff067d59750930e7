package clitest

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// deepWaitSrc recurses 800 deep (about 75 KB of stack), says "ready"
// and waits there for its stdin to close.
const deepWaitSrc = `
#include <stdio.h>
#include <unistd.h>
volatile long sink;
__attribute__((noinline)) long deep(int n) {
	char pad[64];
	pad[n % 64] = (char)n;
	if (n == 0) { char c; puts("ready"); fflush(stdout); while (read(0, &c, 1) > 0) ; return 0; }
	return deep(n - 1) + pad[(n * 7) % 64];
}
int main(void) { sink = deep(800); return 0; }
`

// TestDumpMaxStackCutsWalk (issue 26 item 3): a thread whose stack is
// deeper than --max-stack is unwound as far as the copy goes, and its walk
// ends there (unreadable memory) instead of reading the rest of the stack
// from the process, which runs on after the capture; with the default
// copy the same thread reaches main.
func TestDumpMaxStackCutsWalk(t *testing.T) {
	dir := t.TempDir()
	src, exe := filepath.Join(dir, "deep.c"), filepath.Join(dir, "deep")
	if err := os.WriteFile(src, []byte(deepWaitSrc), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O1", "-g", "-fomit-frame-pointer", "-o", exe, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	cmd := exec.Command(exe)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("target said %q, %v", line, err)
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	full, errOut, code := run(t, "dump", pid)
	if code != 0 || !strings.Contains(full, " main ") && !strings.Contains(full, " main+") {
		t.Skipf("the full dump does not reach main here (exit %d): %s\n%s", code, errOut, full)
	}
	cut, errOut, code := run(t, "dump", pid, "--max-stack", "16384")
	if code != 0 {
		t.Fatalf("dump --max-stack 16384: exit %d\n%s", code, errOut)
	}
	if strings.Contains(cut, " main ") || strings.Contains(cut, " main+") || strings.Contains(cut, "__libc_start") {
		t.Errorf("dump --max-stack 16384 unwound past the copy, to main:\n%s", cut)
	}
	if !strings.Contains(cut, "unreadable-memory") || !strings.Contains(cut, "deep") {
		t.Errorf("dump --max-stack 16384: want deep frames ending in unreadable-memory:\n%s", cut)
	}
}
