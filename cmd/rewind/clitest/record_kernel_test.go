package clitest

import (
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
)

// TestRecordUnwindInKernelMatchesUser records the same runs of CPU-bound
// programs with --unwind-in kernel and --unwind-in user at once: C built without frame
// pointers in Debian's libc (qsort), C++ throwing and catching exceptions
// (libgcc's unwinder), a garbage-collecting Go program, C whose stack GCC
// realigns (DWARF-expression CFAs) and C calling through PLT stubs. At least 99%
// of the kernel walks must reach the thread's root, and the hot
// functions' shares of the samples must agree within 5 points with the
// user-space unwinding of stack copies.
func TestRecordUnwindInKernelMatchesUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("BPF and perf events need root")
	}
	dir := t.TempDir()
	src, _ := filepath.Abs("../../../bpfunwind/testdata")
	cases := []struct {
		name  string
		build [][]string
		hot   []string
	}{
		{"c-nofp-libc", [][]string{{"gcc", "-O2", "-g", "-fomit-frame-pointer", "-o", "c-nofp-libc", src + "/spin.c"}},
			[]string{"inner", "__GI___qsort_r", "msort_with_tmp", "cmp", "main"}},
		{"cxx-throw", [][]string{{"g++", "-O2", "-g", "-o", "cxx-throw", src + "/throw.cc"}},
			[]string{"catcher(int)", "thrower(int)", "__cxa_throw", "_Unwind_RaiseException", "main"}},
		{"go-gc", [][]string{{"go", "build", "-o", "go-gc", src + "/spin.go"}},
			[]string{"main.hot", "runtime.mallocgc", "main.main", "runtime.gcBgMarkWorker"}},
		// GCC's stack realignment: the CFA is a DWARF expression in
		// realign's body and r10 in its prologue.
		{"c-realign", [][]string{{"gcc", "-O2", "-g", "-fomit-frame-pointer", "-o", "c-realign", src + "/realign.c"}},
			[]string{"inner", "realign", "main"}},
		// Calls through a PLT stub (its CFA is the PLT expression)
		// into a shared library.
		{"c-plt", [][]string{{"gcc", "-O2", "-g", "-shared", "-fPIC", "-DLIB", "-o", "libpltnop.so", src + "/plt.c"},
			{"gcc", "-O2", "-g", "-fomit-frame-pointer", "-o", "c-plt", src + "/plt.c", "-L.", "-lpltnop", "-Wl,-rpath,$ORIGIN"}},
			[]string{"nop", "nop@plt", "calls", "main"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, b := range c.build {
				cmd := exec.Command(b[0], b[1:]...)
				cmd.Dir = dir
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("%v: %v\n%s", b, err, out)
				}
			}
			exe := filepath.Join(dir, c.name)
			// Both recordings watch the same run of the program, at
			// once (-p), so that its phases (the Go program's garbage
			// collections) weigh the same in both.
			prog := exec.Command(exe)
			prog.Stdout = io.Discard
			if err := prog.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { prog.Process.Kill(); prog.Wait() }()
			pid := strconv.Itoa(prog.Process.Pid)
			shares := map[string]map[string]float64{}
			stderrs := recordBothModes(t, pid, func(mode string) string { return filepath.Join(dir, c.name+"-"+mode+".folded") }, "-d", "8")
			if t.Failed() {
				return
			}
			for _, mode := range []string{"kernel", "user"} {
				method, pct := fixture.FidelityRow(t, stderrs[mode])
				t.Logf("--unwind-in %s: %s %.2f%% complete", mode, method, pct)
				if mode == "kernel" && (method != "kernel" || pct < 99) {
					t.Errorf("--unwind-in kernel: %s %.2f%% of the stacks reach the root, want kernel >= 99%%\n%s", method, pct, stderrs[mode])
				}
				shares[mode] = fixture.InclusiveShares(t, filepath.Join(dir, c.name+"-"+mode+".folded"), c.hot)
			}
			for _, fn := range c.hot {
				k, u := shares["kernel"][fn], shares["user"][fn]
				t.Logf("%-24s kernel %5.1f%%  user %5.1f%%", fn, k, u)
				if math.Abs(k-u) > 5 {
					t.Errorf("%s: %.1f%% of the samples unwound in the kernel, %.1f%% in user space: more than 5 points apart", fn, k, u)
				}
			}
		})
	}
}

// recordBothModes records process pid with --unwind-in kernel and
// --unwind-in user at once (so that both see the same run of it) at 999
// Hz, each to out(mode) with the extra flags args, and returns each
// mode's standard error. A recording that fails fails the test.
func recordBothModes(t *testing.T, pid string, out func(mode string) string, args ...string) map[string]string {
	t.Helper()
	stderrs := map[string]string{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, mode := range []string{"kernel", "user"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			argv := append([]string{"record", "--unwind-in", mode, "-F", "999", "-o", out(mode)}, args...)
			cmd := exec.Command(rewindBin, append(argv, "-p", pid)...)
			var e strings.Builder
			cmd.Stderr = &e
			err := cmd.Run()
			mu.Lock()
			stderrs[mode] = e.String()
			mu.Unlock()
			if err != nil {
				t.Errorf("record --unwind-in %s: %v\n%s", mode, err, e.String())
			}
		}()
	}
	wg.Wait()
	return stderrs
}
