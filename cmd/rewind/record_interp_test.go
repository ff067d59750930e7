package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
)

// recordInterp records a CPU-bound interpreter process (argv, started
// here) with --unwind-in mode and returns the folded profile's path and
// record's stderr, after checking that the kernel walk's native stacks
// reach the thread's root in at least 99% of the samples (but for
// Tarantool, whose Lua runs in fibers, rooted in coro_init).
func recordInterp(t *testing.T, dir, mode string, argv ...string) (string, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("BPF and perf events need root")
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		t.Skipf("%s not installed", argv[0])
	}
	prog := exec.Command(argv[0], argv[1:]...)
	prog.Stdout = io.Discard
	if err := prog.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { prog.Process.Kill(); prog.Wait() }()
	out := filepath.Join(dir, mode+".folded")
	cmd := exec.Command(rewindBin, "record", "--unwind-in", mode, "-F", "499", "-d", "4", "-o", out, "-p", strconv.Itoa(prog.Process.Pid))
	var e strings.Builder
	cmd.Stderr = &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("record: %v\n%s", err, e.String())
	}
	method, pct := fixture.FidelityRow(t, e.String())
	t.Logf("%s %.2f%% complete", method, pct)
	if mode == "kernel" && (method != "kernel" || pct < 99 && filepath.Base(argv[0]) != "tarantool") {
		t.Errorf("%s %.2f%% of the native stacks reach the root, want kernel >= 99%%\n%s", method, pct, e.String())
	}
	return out, e.String()
}

// TestRecordRubyFramesInKernel: a CPU-bound Debian Ruby 3.1 program
// recorded with the kernel walk, and then unwound in user space (its
// frames read from the process at each sample), names its spinning
// method under its callers, in the program's order, in at least 85% of
// the samples (issue 41), each activation spliced above its rb_vm_exec
// frame: the block called back from the C method loop runs in a second
// one.
func TestRecordRubyFramesInKernel(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "hot.rb")
	if err := os.WriteFile(script, []byte(fixture.RubyHot), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"kernel", "user"} {
		folded, stderr := recordInterp(t, dir, mode, "ruby", script, "60")
		for _, chain := range []string{"rb_vm_exec;<main>;rb_top;loop", "rb_vm_exec;block in rb_top;rb_mid;rb_hot"} {
			if got := chainShare(t, folded, chain); got < 85 {
				b, _ := os.ReadFile(folded)
				t.Errorf("--unwind-in %s: %s in %.1f%% of the samples, want at least 85%%\n%s\n%.3000s", mode, chain, got, stderr, b)
			}
		}
	}
}

// TestRecordLuaFramesInKernel: a CPU-bound script run by Debian's
// stripped GC64 luajit, recorded with the kernel walk, names its
// spinning function under its callers, in the script's order, in at
// least 85% of the samples (issue 41), though most samples are in trace
// code: the walk restarts at the VM frame that entered the trace.
func TestRecordLuaFramesInKernel(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "hot.lua")
	if err := os.WriteFile(script, []byte(fixture.LuaHot), 0o644); err != nil {
		t.Fatal(err)
	}
	folded, _ := recordInterp(t, dir, "kernel", "luajit", script, "60")
	chain := "main chunk;lua_top;lua_mid;lua_hot"
	if got := chainShare(t, folded, chain); got < 85 {
		b, _ := os.ReadFile(folded)
		t.Errorf("%s in %.1f%% of the samples, want at least 85%%\n%.3000s", chain, got, b)
	}
	// Tarantool's LuaJIT (32-bit references, with symbols), whose state
	// is found from the global that holds it: its Lua runs on fiber
	// stacks.
	if _, err := exec.LookPath("tarantool"); err == nil {
		tdir := filepath.Join(dir, "tarantool")
		if err := os.Mkdir(tdir, 0o755); err != nil {
			t.Fatal(err)
		}
		folded, _ := recordInterp(t, tdir, "kernel", "tarantool", script, "60")
		if got := chainShare(t, folded, chain); got < 85 {
			b, _ := os.ReadFile(folded)
			t.Errorf("tarantool: %s in %.1f%% of the samples, want at least 85%%\n%.3000s", chain, got, b)
		}
	}
	// Unwound in user space, the profile says in one line that its Lua
	// frames are missing.
	_, stderr := recordInterp(t, dir, "user", "luajit", script, "60")
	if !strings.Contains(stderr, "runs LuaJIT") || !strings.Contains(stderr, "native frames only") {
		t.Errorf("--unwind-in user of a LuaJIT process does not say its Lua frames are missing:\n%s", stderr)
	}
}
