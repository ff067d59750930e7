package main

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

// pyHot spins in a known Python call chain for the seconds it is given.
const pyHot = `import sys, time
def leaf(n):
    s = 0
    for i in range(n):
        s += i * i
    return s
def middle(n):
    return leaf(n)
def outer():
    end = time.time() + float(sys.argv[1])
    while time.time() < end:
        middle(20000)
outer()
`

// TestRecordPythonFramesInKernel records one run of a CPU-bound Debian
// Python 3.11 program both ways at once (-p): with --unwind-in kernel its
// native stacks must reach the thread's root in at least 99% of the
// samples and its spinning function must be in at least 90% of them,
// under its callers in the program's order spliced above the evaluation loop's
// native frame; the native evaluation loop's share must agree within 5
// points with --unwind-in user's, and so must the Python functions'
// where user-space unwinding shows them.
func TestRecordPythonFramesInKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("BPF and perf events need root")
	}
	const python = "/usr/bin/python3.11"
	if _, err := os.Stat(python); err != nil {
		t.Skipf("%s not installed", python)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "hot.py")
	if err := os.WriteFile(script, []byte(pyHot), 0o644); err != nil {
		t.Fatal(err)
	}
	prog := exec.Command(python, script, "60")
	prog.Stdout = io.Discard
	if err := prog.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { prog.Process.Kill(); prog.Wait() }()
	pid := strconv.Itoa(prog.Process.Pid)
	var wg sync.WaitGroup
	errs := make([]string, 2)
	stderrs := make([]string, 2)
	modes := []string{"kernel", "user"}
	for i, mode := range modes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(rewindBin, "record", "--unwind-in", mode, "-F", "999", "-d", "5", "-o", filepath.Join(dir, mode+".folded"), "-p", pid)
			var e strings.Builder
			cmd.Stderr = &e
			if err := cmd.Run(); err != nil {
				errs[i] = err.Error() + "\n" + e.String()
			}
			stderrs[i] = e.String()
		}()
	}
	wg.Wait()
	for i, e := range errs {
		if e != "" {
			t.Fatalf("record --unwind-in %s: %s", modes[i], e)
		}
	}
	for i, mode := range modes {
		method, pct := fixture.FidelityRow(t, stderrs[i])
		t.Logf("--unwind-in %s: %s %.2f%% complete", mode, method, pct)
		if mode == "kernel" && (method != "kernel" || pct < 99) {
			t.Errorf("--unwind-in kernel: %s %.2f%% of the native stacks reach the root, want kernel >= 99%%\n%s", method, pct, stderrs[i])
		}
	}
	fns := []string{"leaf", "middle", "outer", "_PyEval_EvalFrameDefault"}
	k := fixture.InclusiveShares(t, filepath.Join(dir, "kernel.folded"), fns)
	u := fixture.InclusiveShares(t, filepath.Join(dir, "user.folded"), fns)
	t.Logf("kernel %v, user %v", k, u)
	if k["leaf"] < 90 {
		t.Errorf("--unwind-in kernel: leaf in %.1f%% of the samples, want at least 90%%", k["leaf"])
	}
	chain := chainShare(t, filepath.Join(dir, "kernel.folded"), "_PyEval_EvalFrameDefault;<module>;outer;middle;leaf")
	if chain < 90 {
		t.Errorf("--unwind-in kernel: _PyEval_EvalFrameDefault;<module>;outer;middle;leaf in %.1f%% of the samples, want at least 90%%", chain)
	}
	if d := math.Abs(k["_PyEval_EvalFrameDefault"] - u["_PyEval_EvalFrameDefault"]); d > 5 {
		t.Errorf("_PyEval_EvalFrameDefault: kernel %.1f%%, user %.1f%%: %.1f points apart, want at most 5", k["_PyEval_EvalFrameDefault"], u["_PyEval_EvalFrameDefault"], d)
	}
	for _, fn := range fns[:3] {
		if u[fn] > 0 && math.Abs(k[fn]-u[fn]) > 5 {
			t.Errorf("%s: kernel %.1f%%, user %.1f%%, want at most 5 points apart", fn, k[fn], u[fn])
		}
	}
}

// chainShare is the share (in percent) of a folded profile's samples
// whose stack holds the frames of chain (";"-separated, outermost first)
// in a row.
func chainShare(t *testing.T, folded, chain string) float64 {
	t.Helper()
	b, err := os.ReadFile(folded)
	if err != nil {
		t.Fatal(err)
	}
	var total, in float64
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		sp := strings.LastIndexByte(l, ' ')
		if sp < 0 {
			continue
		}
		n, _ := strconv.ParseFloat(l[sp+1:], 64)
		total += n
		if strings.Contains(";"+l[:sp]+";", ";"+chain+";") {
			in += n
		}
	}
	return 100 * in / math.Max(total, 1)
}

// TestRecordPythonChrootsInKernel: trixie's 3.13 and sid's 3.14, whose
// GCC split the evaluation loop's body out of _PyEval_EvalFrameDefault
// (sid's function is 1,184 bytes; the loop runs in an unnamed 84 KiB
// body), recorded with the kernel walk: at least 90% of the samples hold
// the hot function under its callers in order (issue 43 item 2).
func TestRecordPythonChrootsInKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("BPF, perf events and chroots need root")
	}
	for _, suite := range []string{"trixie", "sid"} {
		t.Run(suite, func(t *testing.T) {
			useUserChroots(t)
			c := fixture.PythonChroot(t, suite)
			script := c.WriteFile("hot.py", []byte(pyHotReady))
			pid := startSpinning(t, c.Command(c.Python, script, "60"))
			folded := filepath.Join(t.TempDir(), "py.folded")
			out, stderr, code := run(t, "record", "--unwind-in", "kernel", "-F", "499", "-d", "4", "-o", folded, "-p", strconv.Itoa(pid))
			if code != 0 {
				t.Fatalf("exit %d: %s%s", code, out, stderr)
			}
			chain := "<module>;outer;middle;leaf"
			if got := chainShare(t, folded, chain); got < 90 {
				b, _ := os.ReadFile(folded)
				t.Errorf("%s in %.1f%% of the samples, want at least 90%%\n%s\n%.2000s", chain, got, stderr, b)
			}
		})
	}
}
