package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/output"
)

var rewindBin string

func TestMain(m *testing.M) {
	if files := os.Getenv("REWIND_TEST_MAP_FILES"); files != "" {
		mapFilesAndWait(strings.Split(files, ":"))
		return
	}
	// Static: one build serves every test, the agent's privilege drop's
	// too (package clitest holds the tests that need no static build).
	os.Exit(fixture.MainWithRewind(m, &rewindBin, true))
}

func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return fixture.Run(t, rewindBin, args...)
}

func TestDumpCore(t *testing.T) {
	v := fixture.Variants[3] // O2-nofp: the case the acceptance names
	exe := fixture.Build(t, "threads", v)
	p := fixture.Start(t, exe)
	core := fixture.Gcore(t, p)

	out, errOut, code := run(t, "dump", "--core", core)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.HasPrefix(out, "PID ") || strings.Count(out, "\nTID ") != 17 {
		t.Errorf("text output has no PID line or not 17 threads:\n%s", out)
	}
	for _, want := range []string{"block_condwait", "t16_start", "start_thread", "[dwarf]", "end: ra-undefined"} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q", want)
		}
	}

	out, errOut, code = run(t, "dump", "--core", core, "--json", "--method", "fp", "--threads", strconv.Itoa(p.PID))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep output.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("JSON: %v\n%s", err, out)
	}
	if rep.PID != p.PID || len(rep.Threads) != 1 || rep.Threads[0].TID != p.PID {
		t.Fatalf("JSON report: pid %d, threads %+v", rep.PID, rep.Threads)
	}
	th := rep.Threads[0]
	if th.End == "" || len(th.Frames) == 0 || th.Frames[0].Method != "context" || th.Frames[0].PC == 0 {
		t.Errorf("JSON thread: %+v", th)
	}
	if !strings.Contains(out, `"file"`) || !strings.Contains(out, `"line"`) {
		t.Errorf("JSON frames carry no file:line although the fixture has debug info")
	}
	for _, key := range []string{`"pid"`, `"threads"`, `"tid"`, `"name"`, `"end"`, `"frames"`, `"pc"`, `"function"`,
		`"offset"`, `"module"`, `"inlined"`, `"method"`} {
		if !strings.Contains(out, key) {
			t.Errorf("JSON lacks %s", key)
		}
	}
}

func TestDumpErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad")
	os.WriteFile(bad, []byte("\x7fELF garbage"), 0o644)
	// A command line rewind cannot run exits 2 (as an unknown command
	// and a bad flag do), an input it cannot read 1.
	for _, c := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"dump"}, "need a PID or --core FILE", 2},
		{[]string{"dump", "abc"}, `"abc" is not a process ID`, 2},
		{[]string{"dump", "1", "2"}, "need one PID, not 2 arguments", 2},
		{[]string{"dump", "1", "--core", "x"}, "give one PID or --core FILE, not both", 2},
		{[]string{"dump", "--core", "/nonexistent/core"}, "/nonexistent/core", 1},
		{[]string{"dump", "--core", bad}, bad, 1},
		{[]string{"dump", "--core", bad, "--method", "magic"}, `unknown --method "magic"`, 1},
		{[]string{"sframe", "dump", "/nonexistent"}, "/nonexistent", 1},
		{[]string{"sframe", "dump", "--readelf", "9", bad}, `unknown --readelf "9"`, 1},
		{[]string{"dump", "--core", bad, "--threads", "1,x"}, `bad thread id "x"`, 1},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`, 2},
		{[]string{"record", "-p", "1", "--", "true"}, "give -p PID or a command, not both", 2},
	} {
		_, errOut, code := run(t, c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("rewind %v: exit %d, stderr %q; want exit %d and an error containing %q", c.args, code, errOut, c.code, c.want)
		}
	}
	// A missing argument is one line, not the help before it.
	for _, args := range [][]string{{"dump"}, {"report"}, {"sframe", "dump"}, {"sframe", "gen"}, {"table"}} {
		_, errOut, code := run(t, args...)
		if code != 2 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "--help") {
			t.Errorf("rewind %v: exit %d, want 2 and one line pointing to --help, stderr:\n%s", args, code, errOut)
		}
	}
	out, _, code := run(t, "dump", "--help")
	if code != 0 || !strings.Contains(out, "--core") || !strings.Contains(out, "return address") {
		t.Errorf("dump --help: exit %d, output:\n%s", code, out)
	}
}

func TestDemo(t *testing.T) {
	if _, err := exec.LookPath("gcore"); err != nil {
		t.Skip("gcore (gdb) not installed: ", err)
	}
	out, errOut, code := run(t, "demo")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"frame pointers:", "DWARF CFI:", "wait_for_quota", "·", "frames found: frame pointers"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	// The point of the demo: DWARF finds every thread's root, frame
	// pointers do not.
	if !strings.Contains(out, "DWARF 4 of 4") || strings.Contains(out, "frame pointers 4 of 4") {
		t.Errorf("demo summary does not show the frame-pointer loss:\n%s", out)
	}
}

// TestSFrameDumpMatchesReadelf: rewind sframe dump prints what the
// system's readelf (binutils 2.40, SFrame v1) prints for a gcc -Wa,--gsframe
// executable, byte for byte.
func TestSFrameDumpMatchesReadelf(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "s.c")
	os.WriteFile(src, []byte("int f(int x) { return x + 1; }\nint main(void) { return f(2); }\n"), 0o644)
	exe := filepath.Join(dir, "s")
	if out, err := exec.Command("gcc", "-O2", "-Wa,--gsframe", src, "-o", exe).CombinedOutput(); err != nil {
		t.Skipf("gcc cannot emit SFrame here: %v %s", err, out)
	}
	want, err := exec.Command("readelf", "--sframe=.sframe", exe).Output()
	if err != nil {
		t.Fatalf("readelf: %v", err)
	}
	got, errOut, code := run(t, "sframe", "dump", exe)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if got != string(want) {
		t.Errorf("rewind sframe dump differs from readelf:\n--- rewind\n%s\n--- readelf\n%s", got, want)
	}
}

// TestDumpPersistentCache checks that dumps answered from the persistent
// caches (DWARF indexes, unwind tables) print exactly what a dump that
// reads all debug information again prints.
func TestDumpPersistentCache(t *testing.T) {
	exe := fixture.Build(t, "recurse", fixture.Variants[3])
	p := fixture.Start(t, exe, "40")
	core := fixture.Gcore(t, p)
	cache := t.TempDir()
	t.Setenv("REWIND_CACHE_DIR", cache)
	fresh, errOut, code := run(t, "dump", "--no-cache", "--core", core)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if files, _ := filepath.Glob(filepath.Join(cache, "*")); len(files) != 0 {
		t.Fatalf("--no-cache wrote %v", files)
	}
	for i := 0; i < 2; i++ {
		out, errOut, code := run(t, "dump", "--core", core)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if out != fresh {
			t.Fatalf("run %d with the cache differs:\n%s\nwithout:\n%s", i+1, out, fresh)
		}
	}
	for _, sub := range []string{"tables", "dwarf"} {
		if files, _ := filepath.Glob(filepath.Join(cache, sub, "*", "*")); len(files) == 0 {
			t.Errorf("nothing cached under %s", sub)
		}
	}
}

// mapFilesAndWait is the test binary run as a target: it maps each file
// (data, not code: a locale archive, a font cache), says "ready" and
// waits for its standard input to close.
func mapFilesAndWait(files []string) {
	var keep [][]byte
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			panic(err)
		}
		b, err := syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ, syscall.MAP_PRIVATE)
		if err != nil {
			panic(err)
		}
		keep = append(keep, b)
		f.Close()
	}
	os.Stdout.WriteString("ready\n")
	io.Copy(io.Discard, os.Stdin)
	runtime.KeepAlive(keep)
}

// startMapper starts the test binary as a target that maps three data
// files (not ELF objects) and waits; it is stopped when t ends.
func startMapper(t *testing.T) (pid int, files []string) {
	dir := t.TempDir()
	for _, name := range []string{"locale-archive", "fonts.cache", "notes.txt"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.Repeat("not an ELF file\n", 512)), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "REWIND_TEST_MAP_FILES="+strings.Join(files, ":"))
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
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("target said %q, %v", line, err)
	}
	maps, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", cmd.Process.Pid))
	if !strings.Contains(string(maps), files[0]) {
		t.Fatalf("target does not map %s:\n%s", files[0], maps)
	}
	return cmd.Process.Pid, files
}

// TestDumpQuietOnDataMappings: files a process maps as data (not ELF
// objects) are not code, so dumping it prints no warning about them.
func TestDumpQuietOnDataMappings(t *testing.T) {
	pid, _ := startMapper(t)
	stdout, stderr, code := run(t, "dump", strconv.Itoa(pid))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if stderr != "" {
		t.Errorf("dump printed to stderr:\n%s", stderr)
	}
	if !strings.Contains(stdout, "runtime.") {
		t.Errorf("no thread shows the Go runtime:\n%s", stdout)
	}
	// --stats says how long the target was stopped and which thread was
	// slowest to stop (issue 13.8).
	_, stderr, code = run(t, "dump", "--stats", "--stop", strconv.Itoa(pid))
	if code != 0 || !regexp.MustCompile(`rewind: pause [0-9.]+ ms: threads stopped after [0-9.]+ ms \(slowest: [0-9]+ `).MatchString(stderr) {
		t.Errorf("dump --stats: exit %d, no pause line:\n%s", code, stderr)
	}
	// ... and how long each thread was stopped.
	if !regexp.MustCompile(`rewind: stopped per thread: (.*, )?` + strconv.Itoa(pid) + ` [0-9.]+ ms`).MatchString(stderr) {
		t.Errorf("dump --stats: no pause per thread:\n%s", stderr)
	}
}

// TestDumpCoreQuietOnDataMappings: gcore leaves read-only file mappings
// out of the core, so their permissions are unknown there; a mapped file
// that is no ELF object is still data, and dumping the core says nothing
// about it (issue 13 item 6).
func TestDumpCoreQuietOnDataMappings(t *testing.T) {
	if _, err := exec.LookPath("gcore"); err != nil {
		t.Skipf("gdb's gcore is not installed: %v", err)
	}
	pid, files := startMapper(t)
	prefix := filepath.Join(t.TempDir(), "core")
	if out, err := exec.Command("gcore", "-o", prefix, strconv.Itoa(pid)).CombinedOutput(); err != nil {
		t.Fatalf("gcore: %v\n%s", err, out)
	}
	stdout, stderr, code := run(t, "dump", "--core", fmt.Sprintf("%s.%d", prefix, pid))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, f := range files {
		if strings.Contains(stderr, f) {
			t.Errorf("dump --core warned about the data file %s:\n%s", f, stderr)
		}
	}
	if !strings.Contains(stdout, "runtime.") {
		t.Errorf("no thread shows the Go runtime:\n%s", stdout)
	}
}
