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
	"github.com/rewindstack/rewind/internal/testutil/perftest"
)

// TestRecordUnwindInKernelMatchesPerf records the same run of a program
// at once with rewind record --unwind-in kernel and with perf record
// --call-graph dwarf (stack copies, as record --unwind-in user takes), the
// perf.data read back by rewind report: C built without frame pointers in
// Debian's libc (qsort) and C++ throwing exceptions. The kernel walks must
// reach the thread's root in at least 99% of the samples, and the hot
// functions' shares of the samples must agree within 5 points with
// perf's.
func TestRecordUnwindInKernelMatchesPerf(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("BPF and perf events need root")
	}
	perf := perftest.RequirePerf(t)
	dir := t.TempDir()
	src, _ := filepath.Abs("../../../bpfunwind/testdata")
	cases := []struct {
		name  string
		build []string
		hot   []string
	}{
		{"c-nofp-libc", []string{"gcc", "-O2", "-g", "-fomit-frame-pointer", "-o", "c-nofp-libc", src + "/spin.c"},
			[]string{"inner", "__GI___qsort_r", "msort_with_tmp", "cmp", "main"}},
		{"cxx-throw", []string{"g++", "-O2", "-g", "-o", "cxx-throw", src + "/throw.cc"},
			[]string{"catcher(int)", "thrower(int)", "__cxa_throw", "_Unwind_RaiseException", "main"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(c.build[0], c.build[1:]...)
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v: %v\n%s", c.build, err, out)
			}
			prog := exec.Command(filepath.Join(dir, c.name))
			prog.Stdout = io.Discard
			if err := prog.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { prog.Process.Kill(); prog.Wait() }()
			pid := strconv.Itoa(prog.Process.Pid)
			kernelOut := filepath.Join(dir, c.name+"-kernel.folded")
			data := filepath.Join(dir, c.name+".data")
			var kernelErr strings.Builder
			var wg sync.WaitGroup
			wg.Add(2)
			go func() {
				defer wg.Done()
				cmd := exec.Command(rewindBin, "record", "--unwind-in", "kernel", "-F", "999", "-d", "8", "-o", kernelOut, "-p", pid)
				cmd.Stderr = &kernelErr
				if err := cmd.Run(); err != nil {
					t.Errorf("record --unwind-in kernel: %v\n%s", err, kernelErr.String())
				}
			}()
			go func() {
				defer wg.Done()
				cmd := exec.Command(perf, "record", "-q", "-e", "cpu-clock", "-F", "999", "--call-graph", "dwarf", "-o", data, "-p", pid, "--", "sleep", "8")
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("perf record: %v\n%s", err, out)
				}
			}()
			wg.Wait()
			if t.Failed() {
				return
			}
			perfOut := filepath.Join(dir, c.name+"-perf.folded")
			if out, err := exec.Command(rewindBin, "report", "-q", "-o", perfOut, data).CombinedOutput(); err != nil {
				t.Fatalf("rewind report: %v\n%s", err, out)
			}
			method, pct := fixture.FidelityRow(t, kernelErr.String())
			t.Logf("--unwind-in kernel: %s %.2f%% complete", method, pct)
			if method != "kernel" || pct < 99 {
				t.Errorf("--unwind-in kernel: %s %.2f%% of the stacks reach the root, want kernel >= 99%%\n%s", method, pct, kernelErr.String())
			}
			k := fixture.InclusiveShares(t, kernelOut, c.hot)
			p := fixture.InclusiveShares(t, perfOut, c.hot)
			for _, fn := range c.hot {
				t.Logf("%-24s kernel %5.1f%%  perf %5.1f%%", fn, k[fn], p[fn])
				if math.Abs(k[fn]-p[fn]) > 5 {
					t.Errorf("%s: %.1f%% of the samples unwound in the kernel, %.1f%% of perf record's: more than 5 points apart", fn, k[fn], p[fn])
				}
			}
		})
	}
}
