package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
)

// pyHotReady is pyHot that says "ready" once it spins.
const pyHotReady = `import sys, time
def leaf(n):
    s = 0
    for i in range(n):
        s += i * i
    return s
def middle(n):
    return leaf(n)
def outer():
    end = time.time() + float(sys.argv[1])
    print("ready", flush=True)
    while time.time() < end:
        middle(20000)
outer()
`

// pyChain is the hot chain as a folded stack shows it, outermost first.
const pyChain = "_PyEval_EvalFrameDefault;<module>;outer;middle;leaf"

// pyReadsRE matches the fidelity table's line of the Python frames read
// after each sample.
var pyReadsRE = regexp.MustCompile(`(?m)^  python +frames read after each sample .*: (\d+) of (\d+) samples read whole .*, (\d+) torn .*, (\d+) cut, (\d+) with no python frame; (\d+) read late`)

// checkUserPython checks a recording in user space of pyHotReady: its hot
// chain in at least 90% of the samples, and the fidelity table's line of
// the Python frames read, every sample of the process counted in it.
func checkUserPython(t *testing.T, folded, stderr, chain string) {
	t.Helper()
	share := chainShare(t, folded, chain)
	m := pyReadsRE.FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no line of the Python frames read in the fidelity table:\n%s", stderr)
	}
	t.Logf("%s in %.1f%% of the samples; %s", chain, share, strings.TrimSpace(m[0]))
	if share < 90 {
		t.Errorf("%s in %.1f%% of the samples, want at least 90%%\n%s", chain, share, stderr)
	}
	whole, _ := strconv.Atoi(m[1])
	n, _ := strconv.Atoi(m[2])
	if n == 0 || float64(whole) < 0.9*float64(n) {
		t.Errorf("%d of %d samples' Python frames read whole, want at least 90%%", whole, n)
	}
}

// TestRecordPythonFramesInUser records CPU-bound Python programs with
// --unwind-in user, where the stack copies hold no Python frame and
// rewind reads them from the process at each sample: Debian's 3.11 as
// user nobody (the privileges of a user profiling a program of its own:
// perf events of its own processes, no BPF), started by rewind; and
// trixie's 3.13 and sid's 3.14 in their chroots (when built), attached
// to with -p. In each, at least 90% of the samples hold the hot function
// under its callers, in the program's order, above the evaluation loop
// (unnamed in sid's 3.14, which has no symbol for it: placed by the
// entry frames' addresses on the C stack).
func TestRecordPythonFramesInUser(t *testing.T) {
	const python = "/usr/bin/python3.11"
	if _, err := os.Stat(python); err != nil {
		t.Skipf("%s not installed", python)
	}
	t.Run("debian-3.11", func(t *testing.T) {
		// A directory user nobody can read and write: the binary, the
		// script, the output.
		dir, err := os.MkdirTemp("", "rewind-pyuser-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		os.Chmod(dir, 0o777)
		bin := filepath.Join(dir, "rewind")
		b, err := os.ReadFile(rewindBin)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(bin, b, 0o755)
		script := filepath.Join(dir, "hot.py")
		os.WriteFile(script, []byte(pyHotReady), 0o644)
		folded := filepath.Join(dir, "py.folded")
		cmd := exec.Command(bin, "record", "--unwind-in", "user", "-F", "499", "-o", folded, "--", python, script, "4")
		cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CACHE_HOME="+dir)
		if os.Geteuid() == 0 {
			b, _ := os.ReadFile("/proc/sys/kernel/perf_event_paranoid")
			if p, err := strconv.Atoi(strings.TrimSpace(string(b))); err != nil || p > 2 {
				t.Skipf("kernel.perf_event_paranoid is %q: a user records its own processes only at 2 or less", b)
			}
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v\n%s", err, stderr.String())
		}
		checkUserPython(t, folded, stderr.String(), pyChain)
	})
	t.Run("debian-3.11-threads", func(t *testing.T) { userPythonThreads(t, python) })
	for _, suite := range []string{"trixie", "sid"} {
		t.Run(suite, func(t *testing.T) {
			if os.Geteuid() != 0 {
				t.Skip("running a chroot needs root")
			}
			useUserChroots(t)
			c := fixture.PythonChroot(t, suite)
			script := c.WriteFile("hot.py", []byte(pyHotReady))
			pid := startSpinning(t, c.Command(c.Python, script, "60"))
			folded := filepath.Join(t.TempDir(), "py.folded")
			out, stderr, code := run(t, "record", "--unwind-in", "user", "-F", "499", "-d", "4", "-o", folded, "-p", strconv.Itoa(pid))
			if code != 0 {
				t.Fatalf("exit %d: %s%s", code, out, stderr)
			}
			chain := pyChain
			if suite == "sid" {
				// Its python3.14 names no _PyEval_EvalFrameDefault:
				// the entry frames it keeps on the C stack place the
				// Python frames above the unnamed evaluation loop.
				chain = "[unknown] python3.14;<module>;outer;middle;leaf"
			}
			checkUserPython(t, folded, stderr, chain)
		})
	}
}

// useUserChroots points the chroot cache at the user's, where .ci/run
// builds them once (TestMain points the cache at a fresh directory).
func useUserChroots(t *testing.T) {
	if os.Getenv("REWIND_CHROOT_DIR") == "" {
		if dir, err := os.UserCacheDir(); err == nil {
			t.Setenv("REWIND_CHROOT_DIR", filepath.Join(dir, "rewind", "chroots"))
		}
	}
}

// startSpinning starts cmd (which must print "ready" once it spins),
// killed when the test ends, and returns its process id once it is
// ready.
func startSpinning(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := sc.Scan() && sc.Text() == "ready"
		ready <- ok
		for sc.Scan() {
		}
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("the program exited before it said ready")
		}
	case <-time.After(fixture.ReadyTimeout):
		t.Fatalf("the program did not say ready in %v", fixture.ReadyTimeout)
	}
	return cmd.Process.Pid
}

// pyThreads runs spinA and spinB in a thread each.
const pyThreads = `import sys, time, threading
def spinA(n):
    s = 0
    for i in range(n): s += i
    return s
def spinB(n):
    s = 0
    for i in range(n): s += i * 2
    return s
def run(f):
    end = time.time() + float(sys.argv[1])
    while time.time() < end: f(10000)
ts = [threading.Thread(target=run, args=(f,)) for f in (spinA, spinB)]
for t in ts: t.start()
for t in ts: t.join()
`

// userPythonThreads records two Python threads spinning in functions of
// their own with --unwind-in user into a pprof profile, which go tool
// pprof -traces prints per thread: each thread's samples name its own
// function only (frames read for the thread sampled), under run and the
// thread's bootstrap; the main thread's module-level frame is <module>.
func userPythonThreads(t *testing.T, python string) {
	dir := t.TempDir()
	script := filepath.Join(dir, "threads.py")
	os.WriteFile(script, []byte(pyThreads), 0o644)
	prof := filepath.Join(dir, "py.pb.gz")
	if out, stderr, code := run(t, "record", "--unwind-in", "user", "-F", "499", "-o", prof, "--", python, script, "3"); code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, stderr)
	}
	out, err := exec.Command("go", "tool", "pprof", "-traces", prof).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof -traces: %v\n%s", err, out)
	}
	// Each trace: "thread:", "pid:", "tid:" labels, then its frames.
	spins := map[string]map[string]int{} // tid -> spin function -> traces
	module := false
	tid := ""
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 2 && f[0] == "tid:":
			tid = f[1]
		case len(f) > 0 && (f[len(f)-1] == "spinA" || f[len(f)-1] == "spinB"):
			if spins[tid] == nil {
				spins[tid] = map[string]int{}
			}
			spins[tid][f[len(f)-1]]++
		case len(f) > 0 && f[len(f)-1] == "<module>":
			module = true
		}
	}
	seen := map[string]bool{}
	for tid, fns := range spins {
		if len(fns) != 1 {
			t.Errorf("thread %s: traces name %v, want one spinning function", tid, fns)
		}
		for fn := range fns {
			seen[fn] = true
		}
	}
	if !seen["spinA"] || !seen["spinB"] || !module {
		t.Errorf("spinA %v, spinB %v, <module> %v in go tool pprof -traces, want all:\n%s", seen["spinA"], seen["spinB"], module, out)
	}
	t.Logf("traces naming each spinning function, per thread: %v", spins)
}
