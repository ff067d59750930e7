// Package perftest holds what the tests of rewind's profiler share: a
// CPU-bound multi-threaded C program built at test time, and checks for
// the privileges and tools (perf_event_open, perf) the tests need.
package perftest

import (
	"bytes"
	_ "embed"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

//go:embed csrc/cpu.c
var cpuSource []byte

//go:embed gosrc/main.go.txt
var goSource []byte

var (
	buildMu sync.Mutex
	built   = map[string][]byte{} // executables by flags, compiled once
)

// BuildCPU compiles cpu.c (usage: cpu SECONDS [THREADS]) with -O2, -g,
// -pthread and the given extra flags ("-fomit-frame-pointer" or
// "-fno-omit-frame-pointer") and returns the executable, in a directory
// of tb's (removed with it). A missing compiler skips tb.
//
// Each set of flags is compiled once per test binary; later calls write
// the same bytes anew into their own directory, so that no build
// outlives its test in the temporary directory.
func BuildCPU(tb testing.TB, flags ...string) string {
	tb.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		tb.Skipf("no C compiler (%s): %v", cc, err)
	}
	key := strings.Join(flags, " ")
	buildMu.Lock()
	defer buildMu.Unlock()
	exe := filepath.Join(tb.TempDir(), "cpu")
	if b, ok := built[key]; ok {
		writeExe(tb, exe, b)
		return exe
	}
	src := filepath.Join(filepath.Dir(exe), "cpu.c")
	if err := os.WriteFile(src, cpuSource, 0o644); err != nil {
		tb.Fatal(err)
	}
	args := append([]string{"-O2", "-g", "-pthread"}, flags...)
	args = append(args, "-o", exe, src)
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		tb.Fatalf("%s %s: %v\n%s", cc, strings.Join(args, " "), err, out)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		tb.Fatal(err)
	}
	built[key] = b
	return exe
}

// writeExe writes an executable through a child process (cat), so that
// no descriptor of this process ever has it open for writing: a fork
// in another goroutine meanwhile would carry that descriptor into its
// child, and running the file would fail with ETXTBSY until the child
// execs (golang.org/issue/22315).
func writeExe(tb testing.TB, path string, b []byte) {
	tb.Helper()
	cmd := exec.Command("/bin/sh", "-c", `cat > "$0"`, path)
	cmd.Stdin = bytes.NewReader(b)
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("writing %s: %v\n%s", path, err, out)
	}
	if err := os.Chmod(path, 0o755); err != nil {
		tb.Fatal(err)
	}
}

// RequirePerfEvent skips tb unless this process may open a sampling
// cpu-clock event with user stack copies on itself, saying what is missing.
func RequirePerfEvent(tb testing.TB) {
	tb.Helper()
	var attr [136]byte
	le := func(off int, v uint64, n int) {
		for i := 0; i < n; i++ {
			attr[off+i] = byte(v >> (8 * i))
		}
	}
	le(0, 1, 4)             // PERF_TYPE_SOFTWARE
	le(4, 136, 4)           // size
	le(8, 0, 8)             // PERF_COUNT_SW_CPU_CLOCK
	le(16, 99, 8)           // sample_freq
	le(24, 1<<13, 8)        // PERF_SAMPLE_STACK_USER
	le(40, 1|1<<5|1<<10, 8) // disabled, exclude_kernel, freq
	le(88, 4096, 4)         // sample_stack_user
	fd, _, errno := unix.Syscall6(unix.SYS_PERF_EVENT_OPEN, uintptr(unsafe.Pointer(&attr[0])), 0, ^uintptr(0), ^uintptr(0), unix.PERF_FLAG_FD_CLOEXEC, 0)
	if errno != 0 {
		p, _ := os.ReadFile("/proc/sys/kernel/perf_event_paranoid")
		tb.Skipf("perf_event_open not permitted (%v; kernel.perf_event_paranoid=%s): needs root/CAP_PERFMON or paranoid <= 2", errno, strings.TrimSpace(string(p)))
	}
	unix.Close(int(fd))
}

// RequirePerf skips tb unless the perf tool is installed and can record.
func RequirePerf(tb testing.TB) string {
	tb.Helper()
	RequirePerfEvent(tb)
	path, err := exec.LookPath("perf")
	if err != nil {
		tb.Skip("perf is not installed (apt-get install linux-perf)")
	}
	if out, err := exec.Command(path, "version").CombinedOutput(); err != nil {
		tb.Skipf("perf does not run: %v\n%s", err, out)
	}
	return path
}

// BuildGo compiles a CPU-bound Go program (usage: prog SECONDS; main and 3
// goroutines spin in main.work -> main.spin) with the installed go
// command and extra build flags (such as -ldflags=-s -w), and returns the
// executable. A missing go command skips tb.
func BuildGo(tb testing.TB, flags ...string) string {
	tb.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		tb.Skipf("no go command: %v", err)
	}
	dir := tb.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), goSource, 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module spin\n\ngo 1.21\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	exe := filepath.Join(dir, "spin")
	cmd := exec.Command(goCmd, append(append([]string{"build", "-o", exe}, flags...), ".")...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build %v: %v\n%s", flags, err, out)
	}
	return exe
}

// UntilExit returns a session.Pump Check function for tests: it stops
// the pump when the recorded program's exit is reported on done, storing
// the exit error in *exitErr, and fails tb when the program has not exited
// within a minute.
func UntilExit(tb testing.TB, done <-chan error, exitErr *error) func(hup bool) string {
	deadline := time.Now().Add(time.Minute)
	return func(bool) string {
		select {
		case err := <-done:
			*exitErr = err
			return "program exited"
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatal("the recorded program did not exit within a minute")
		}
		return ""
	}
}

// Busy reports whether the machine's 1-minute load average is at least
// its number of CPUs, with the load average: a recording's reader may
// then be kept off CPU long enough for a ring buffer to fill.
func Busy() (bool, string) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return false, ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return false, ""
	}
	load, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return false, ""
	}
	return load >= float64(runtime.NumCPU()), f[0]
}
