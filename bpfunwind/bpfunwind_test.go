package bpfunwind

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
)

// load loads the unwinder for pids, skipping when the machine cannot run
// BPF programs for want of privilege.
func load(t *testing.T, pids ...int) *Unwinder {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("BPF needs root (or CAP_BPF and CAP_PERFMON)")
	}
	u, err := Load(Options{PIDs: pids})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(func() { u.Close() })
	return u
}

// startReady runs argv and waits for it to print "ready".
func startReady(t *testing.T, argv ...string) *exec.Cmd {
	t.Helper()
	cmd, _ := startLines(t, argv...)
	return cmd
}

// startLines is startReady returning the program's further lines too.
func startLines(t *testing.T, argv ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(out)
	if !lines.Scan() || strings.TrimSpace(lines.Text()) != "ready" {
		t.Fatalf("%s: %q, %v", argv[0], lines.Text(), lines.Err())
	}
	return cmd, lines
}

// startC builds testdata/NAME.c with gcc -O2 -g and flags, runs it until
// it prints "ready" and returns its PID and further lines.
func startC(t *testing.T, name string, flags ...string) (int, *bufio.Scanner) {
	t.Helper()
	dir := t.TempDir()
	src, _ := filepath.Abs("testdata/" + name + ".c")
	build(t, dir, append(append([]string{"gcc", "-O2", "-g"}, flags...), "-o", name, src)...)
	cmd, lines := startLines(t, filepath.Join(dir, name))
	return cmd.Process.Pid, lines
}

// loadOffCPU is load for pid with the off-CPU program attached.
func loadOffCPU(t *testing.T, pid int) *Unwinder {
	t.Helper()
	u := load(t, pid)
	if err := u.OffCPU(0); err != nil {
		t.Fatal(err)
	}
	return u
}

func build(t *testing.T, dir string, argv ...string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		if _, lerr := exec.LookPath(argv[0]); lerr != nil {
			t.Skipf("%s not installed", argv[0])
		}
		t.Fatalf("%v: %v\n%s", argv, err, out)
	}
}

// collect samples pid on CPU until it has at least n samples (or a minute
// passed) and returns the stacks of pid, added up.
func collect(t *testing.T, u *Unwinder, pid int, n uint64) []Stack {
	t.Helper()
	if err := u.OnCPU(999); err != nil {
		t.Fatal(err)
	}
	var all []Stack
	var total uint64
	deadline := time.Now().Add(time.Minute)
	for total < n && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		st, err := u.Read()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st {
			if s.PID == pid {
				all = append(all, s)
				total += s.Value
			}
		}
	}
	if total < n {
		t.Fatalf("%d samples of process %d in a minute, want %d", total, pid, n)
	}
	return all
}

// names symbolizes a stack's user PCs with rewind's symbolizer.
func names(sym *symbolize.Symbolizer, space *target.AddressSpace, s Stack) []string {
	var out []string
	for i, pc := range s.User {
		lookup := pc
		if i > 0 {
			lookup--
		}
		m := space.Find(lookup)
		fn := "?"
		if m != nil {
			if ls := sym.Frame(m, pc, i == 0); len(ls) > 0 && ls[len(ls)-1].Function != "" {
				fn = ls[len(ls)-1].Function
			}
		}
		if i := strings.IndexByte(fn, '.'); i > 0 && !strings.Contains(fn, "/") && !strings.HasPrefix(fn, "runtime.") && !strings.HasPrefix(fn, "main.") {
			fn = fn[:i] // inner.constprop.0
		}
		out = append(out, fn)
	}
	return out
}

// TestNoFramePointersIntoLibc samples a C program built without frame
// pointers whose hot path is in libc's qsort (Debian builds libc without
// them too): the kernel walk must reach the thread's root in at least 99%
// of the samples, with the program's own call chain (as its source says)
// in order under the leaf.
func TestNoFramePointersIntoLibc(t *testing.T) {
	pid, _ := startC(t, "spin", "-fomit-frame-pointer")
	u := load(t, pid)
	stacks := collect(t, u, pid, 500)
	objs := &target.Objects{}
	space := target.NewAddressSpace(u.Maps(pid), objs)
	sym := &symbolize.Symbolizer{}
	var total, complete, chain uint64
	ends := map[End]uint64{}
	for _, s := range stacks {
		total += s.Value
		ends[s.End] += s.Value
		if s.End.Complete() {
			complete += s.Value
		}
		fns := strings.Join(names(sym, space, s), ";")
		if strings.Contains(fns, "inner;middle;outer;main;__libc_start_call_main;__libc_start_main;_start") {
			chain += s.Value
		}
	}
	t.Logf("%d samples: %d complete, %d with inner;middle;outer;main; ends %v", total, complete, chain, ends)
	if complete*100 < total*99 {
		t.Errorf("%d of %d samples reach the root, want >= 99%%", complete, total)
	}
	// Most samples are in qsort, inner's loop or cmp; all run under
	// inner, except the few in main's loop itself.
	if chain*100 < total*95 {
		t.Errorf("%d of %d samples show inner;middle;outer;main, want >= 95%%", chain, total)
	}
}

// TestGo samples a CPU-bound, allocating Go program (its own .debug_frame
// rows, frame pointers where they are missing, the garbage collector's
// threads): at least 99% of its samples must reach a Go top frame
// (runtime.goexit, runtime.mstart) or the thread root, and main.hot's
// samples show main.main under it as the program's source says.
func TestGo(t *testing.T) {
	dir := t.TempDir()
	src, _ := filepath.Abs("testdata/spin.go")
	build(t, dir, "go", "build", "-o", "spin", src)
	cmd := startReady(t, filepath.Join(dir, "spin"))
	pid := cmd.Process.Pid
	u := load(t, pid)
	stacks := collect(t, u, pid, 500)
	space := target.NewAddressSpace(u.Maps(pid), &target.Objects{})
	sym := &symbolize.Symbolizer{}
	var total, complete, hot, hotMain uint64
	ends := map[End]uint64{}
	for _, s := range stacks {
		total += s.Value
		ends[s.End] += s.Value
		if s.End.Complete() {
			complete += s.Value
		}
		fns := names(sym, space, s)
		if testing.Verbose() && ends[s.End] < 3 {
			t.Logf("%s %x %s", s.End, s.User, strings.Join(fns, ";"))
		}
		if len(fns) > 0 && fns[0] == "main.hot" {
			hot += s.Value
			if strings.HasSuffix(strings.Join(fns, ";"), "main.hot;main.main;runtime.main;runtime.goexit") {
				hotMain += s.Value
			}
		}
	}
	t.Logf("%d samples: %d complete, %d in main.hot (%d main.hot;main.main;runtime.main;runtime.goexit); ends %v", total, complete, hot, hotMain, ends)
	if complete*100 < total*99 {
		t.Errorf("%d of %d samples reach the root, want >= 99%%", complete, total)
	}
	if hot*2 < total || hotMain != hot {
		t.Errorf("%d of %d samples in main.hot, %d of them under main.main: want most, and all", hot, total, hotMain)
	}
}

// TestOffCPU times a program that sleeps 2 ms 500 times a second (its own
// account of the time asked): the blocked time the kernel counts under
// main -> waiter must be at least 90% of what it asked for while traced
// (sleeps overshoot by the timer slack and the wait for a CPU) and at most
// the wall time counted, and every stack must reach the root.
func TestOffCPU(t *testing.T) {
	pid, lines := startC(t, "block", "-fomit-frame-pointer")
	u := loadOffCPU(t, pid)
	// The program's own account: sleeps asked between two of its lines
	// printed after the counts were cleared (lines printed while the
	// unwinder loaded wait in the pipe: skipped by their time).
	u.Read()
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	t0 := ts.Nano()
	var first, last int64 = -1, -1
	for n := 0; n < 5 && lines.Scan(); {
		var asked, at int64
		fmt.Sscan(lines.Text(), &asked, &at)
		if at < t0 {
			continue
		}
		if first < 0 {
			first = asked
		} else {
			n++
		}
		last = asked
	}
	stacks, err := u.Read()
	if err != nil {
		t.Fatal(err)
	}
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	wall := uint64(ts.Nano() - t0) // the one thread cannot be blocked longer
	space := target.NewAddressSpace(u.Maps(pid), &target.Objects{})
	sym := &symbolize.Symbolizer{}
	var total, waiting, complete uint64
	for _, s := range stacks {
		if s.PID != pid {
			continue
		}
		total += s.Value
		if s.End.Complete() {
			complete += s.Value
		}
		fns := strings.Join(names(sym, space, s), ";")
		if strings.Contains(fns, "waiter;main;__libc_start_call_main;__libc_start_main;_start") {
			waiting += s.Value
		}
	}
	asked := uint64(last - first)
	t.Logf("asked %d ns of sleep, counted %d ns blocked (%d under waiter, %d complete) in %d ns", asked, total, waiting, complete, wall)
	if waiting < asked*9/10 || waiting > wall {
		t.Errorf("%d ns blocked under waiter for %d ns of sleep asked", waiting, asked)
	}
	if complete*100 < total*99 {
		t.Errorf("%d of %d ns in stacks that reach the root", complete, total)
	}
}
