package live

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestKilledMidCapture kills (SIGKILL) a process in the middle of a
// capture, while every thread of the target is in a ptrace stop, and
// checks that the kernel lets them all run again: the tracer thread's
// exit detaches its tracees (exit_ptrace), and since PTRACE_SEIZE queued
// no SIGSTOP nothing is left to stop them. The capturing process is this
// test binary run again with REWIND_LIVE_HOLD set (see holdMain), both in
// Capture (a test hook sleeps with the threads stopped) and in
// WithStopped (the callback sleeps).
func TestKilledMidCapture(t *testing.T) {
	for _, mode := range []string{"capture", "lazy"} {
		t.Run(mode, func(t *testing.T) {
			tg := threadsTarget(t)
			child := exec.Command(os.Args[0], "-test.run=^$")
			child.Env = append(os.Environ(), "REWIND_LIVE_HOLD="+strconv.Itoa(tg.pid), "REWIND_LIVE_HOLD_MODE="+mode)
			child.Stderr = os.Stderr
			out, err := child.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := child.Start(); err != nil {
				t.Fatal(err)
			}
			defer child.Wait()
			defer child.Process.Kill()
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil || line != "stopped\n" {
				t.Fatalf("child said %q, %v", line, err)
			}
			// Every thread is in a ptrace stop, traced by a thread of the
			// child.
			waitAllState(t, tg.pid, "t", time.Second)
			ts, _ := tasks(tg.pid)
			for _, x := range ts {
				if x.tracer == 0 || tgidOf(x.tracer) != child.Process.Pid {
					t.Fatalf("thread %d traced by %d, not by the child %d", x.tid, x.tracer, child.Process.Pid)
				}
			}
			if err := child.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			child.Wait()
			// No thread may be left stopped or traced.
			tids := waitAllState(t, tg.pid, "S", time.Second)
			t.Logf("all %d threads asleep again %v after SIGKILL of the tracer", len(tids), time.Since(killed).Round(time.Microsecond))
			checkReleased(t, tg.pid, "S")
		})
	}
}

func tgidOf(tid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", tid))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(statusField(b, "Tgid"))
	return n
}

// TestTargetExitsMidCapture kills the target while its threads are
// stopped: Capture returns without hanging, says the process exited, and
// leaves no zombie tracee behind (the target is reaped normally).
func TestTargetExitsMidCapture(t *testing.T) {
	tg := threadsTarget(t)
	testHookStopped = func(pid int) {
		syscall.Kill(pid, syscall.SIGKILL)
		// SIGKILL wakes the stopped threads; wait until they are gone.
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && !processGone(pid); {
			time.Sleep(time.Millisecond)
		}
	}
	defer func() { testHookStopped = nil }()
	s, err := Capture(tg.pid, Options{})
	if !errors.Is(err, ErrExited) || s == nil {
		t.Fatalf("Capture returned %v, %v; want a partial snapshot and ErrExited", s, err)
	}
	t.Logf("Capture: %v", err)
	n := 0
	for _, th := range s.Threads {
		if th.Err == nil && len(th.Stack.Data) > 0 {
			n++
		}
	}
	if n != 17 {
		t.Errorf("%d threads with registers and stack, want the 17 captured before the kill", n)
	}
	done := make(chan error, 1)
	go func() { done <- tg.cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("target ended with %v, want killed by SIGKILL", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("target not reaped within 5s of the capture")
	}
	tg.reapOnce.Do(func() {})
}

// TestThreadsComingAndGoing captures, 50 times and until it has seen 100
// threads, a program that creates and ends threads all the time: every
// capture succeeds, threads that end meanwhile are reported (not fatal),
// threads created meanwhile are caught, and nothing is left stopped or
// traced.
//
// A thread that has not stopped within StopTimeout is left to the tracer,
// traced until it stops (see TestStopTimeout). The spawner's threads never
// sleep uninterruptibly, but on a loaded machine one may wait that long
// for a CPU; the test waits for every stop, however late.
func TestThreadsComingAndGoing(t *testing.T) {
	tg := startTarget(t, true, compileC(t, "spawner"))
	defer func(d time.Duration) { StopTimeout = d }(StopTimeout)
	StopTimeout = time.Minute
	var rounds, late, gone, ok int
	testHookDone = func(s *session) {
		if s.rounds > 1 {
			late++
		}
		rounds += s.rounds
		for _, th := range s.threads {
			if sp, ok := th.regs.SP(); ok && th.err == nil && len(th.stack.Data) == 0 {
				var near []string
				for _, m := range s.ranges {
					if m.End+1<<20 > sp && m.Start < sp+1<<20 {
						near = append(near, fmt.Sprintf("%x-%x", m.Start, m.End))
					}
				}
				t.Errorf("thread %d: no stack copied: SP %#x, probed %v, sig %d, round count %d; mappings near SP: %v", th.tid, sp, th.probed, th.sig, s.rounds, near)
			}
		}
	}
	defer func() { testHookDone = nil }()
	seen := map[int]bool{}
	var pauses []time.Duration
	// The spawner need not run between two captures: go on until it has.
	const captures, maxCaptures = 50, 1000
	i := 0
	for ; i < captures || len(seen) < 100 && i < maxCaptures; i++ {
		s, err := Capture(tg.pid, Options{})
		if err != nil {
			t.Fatalf("capture %d: %v", i, err)
		}
		pauses = append(pauses, s.Pause)
		if s.Threads[0].TID != tg.pid || s.Threads[0].Err != nil {
			t.Fatalf("capture %d: main thread %d: %v", i, s.Threads[0].TID, s.Threads[0].Err)
		}
		for _, th := range s.Threads {
			seen[th.TID] = true
			switch {
			case th.Err == nil:
				if sp, _ := th.Regs.SP(); len(th.Stack.Data) == 0 || th.Stack.Addr != sp-redZone {
					t.Errorf("capture %d: thread %d: SP %#x, %d bytes at %#x", i, th.TID, sp, len(th.Stack.Data), th.Stack.Addr)
				}
				ok++
			case isGone(th.Err):
				gone++
			default:
				t.Errorf("capture %d: thread %d: %v", i, th.TID, th.Err)
			}
		}
		ts, _ := tasks(tg.pid)
		for _, x := range ts {
			if x.tracer != 0 {
				t.Fatalf("capture %d: thread %d still traced by %d", i, x.tid, x.tracer)
			}
		}
		time.Sleep(time.Millisecond)
	}
	// A thread left stopped would stay in t for good.
	checkReleased(t, tg.pid, "RSD")
	lo, med, hi := pauseStats(pauses)
	t.Logf("%d captures: %d threads captured, %d ended during a capture, %d distinct TIDs; %d captures found threads created while stopping (%d rounds in all); pause min %v median %v max %v", i, ok, gone, len(seen), late, rounds, lo, med, hi)
	if len(seen) < 100 {
		t.Errorf("only %d distinct threads seen in %d captures: the spawner is not spawning", len(seen), i)
	}
}

// TestMainThreadExited captures a process whose main thread called
// pthread_exit: the main thread is reported, not captured, and the maps
// and executable come from another thread.
func TestMainThreadExited(t *testing.T) {
	needAMD64(t)
	exe := compileC(t, "leaderexit")
	tg := startTarget(t, true, exe)
	tg.tids = waitAllState(t, tg.pid, "ZS", 5*time.Second)
	s := mustCapture(t, tg.pid, Options{})
	if len(s.Threads) != 3 || s.Threads[0].TID != tg.pid || s.Threads[0].Err == nil {
		t.Fatalf("threads %+v", s.Threads)
	}
	t.Logf("main thread: %v", s.Threads[0].Err)
	for _, th := range s.Threads[1:] {
		if th.Err != nil || len(th.Stack.Data) == 0 {
			t.Errorf("thread %d: %v", th.TID, th.Err)
		}
	}
	if s.Exe != exe || len(s.Maps) == 0 || s.FindMapping(must(s.Threads[1].Regs.PC())) == nil {
		t.Errorf("Exe %q (want %q), %d maps", s.Exe, exe, len(s.Maps))
	}
	checkReleased(t, tg.pid, "ZS")
}

func must(v uint64, ok bool) uint64 { return v }

// TestChildWithConcurrentWaiter: when the target is a child of the
// capturing process and another thread of it waits for that child (here
// os.Process.Wait, as os/exec's Cmd.Wait does), the kernel reports the
// main thread's ptrace stop to that waiter as well as to the tracer, and
// whichever waits first consumes it (see ErrWaitedChild). Capture refuses
// such a target, and the waiter is unharmed. Forced to capture anyway,
// the capture itself must still stop, capture and release every thread
// rather than wait forever for a report that went elsewhere; the waiter
// then returns early, with a stop.
func TestChildWithConcurrentWaiter(t *testing.T) {
	tg := threadsTarget(t)
	waited := make(chan *os.ProcessState, 1)
	go func() {
		st, _ := tg.cmd.Process.Wait()
		waited <- st
	}()
	// Let the waiter block in waitid.
	for deadline := time.Now().Add(5 * time.Second); checkWaiters(tg.pid) == nil; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the waiting goroutine is not seen waiting")
		}
	}
	_, err := Capture(tg.pid, Options{})
	werr := WithStopped(tg.pid, Options{}, func(*Snapshot) error { return nil })
	for _, e := range []error{err, werr} {
		if !errors.Is(e, ErrWaitedChild) || !strings.Contains(e.Error(), "is waiting for it") {
			t.Errorf("capture of a waited-for child: %v, want ErrWaitedChild", e)
		}
	}
	t.Logf("refused: %v", err)
	checkReleased(t, tg.pid, "S")

	testSkipWaiterCheck = true
	defer func() { testSkipWaiterCheck = false }()
	s := mustCapture(t, tg.pid, Options{})
	for _, th := range s.Threads {
		if th.Err != nil || len(th.Stack.Data) == 0 {
			t.Errorf("thread %d: %v", th.TID, th.Err)
		}
	}
	checkReleased(t, tg.pid, "S")
	select {
	case st := <-waited:
		t.Logf("forced: the concurrent Wait returned %v: the kernel gave it the main thread's ptrace stop (pause %v)", st, s.Pause)
	case <-time.After(100 * time.Millisecond):
		t.Logf("forced: the concurrent Wait did not get the stop this time (pause %v)", s.Pause)
	}
	// The process is still ours to kill and reap.
	tg.reapOnce.Do(func() {
		syscall.Kill(tg.pid, syscall.SIGKILL)
		var ws unix.WaitStatus
		unix.Wait4(tg.pid, &ws, 0, nil)
	})
}

// TestErrors checks the refusals: they must say what is wrong.
func TestErrors(t *testing.T) {
	check := func(name string, pid int, target error, msg string) {
		t.Helper()
		_, err := Capture(pid, Options{})
		werr := WithStopped(pid, Options{}, func(*Snapshot) error {
			t.Errorf("%s: WithStopped called fn", name)
			return nil
		})
		for _, e := range []error{err, werr} {
			if !errors.Is(e, target) || !strings.Contains(fmt.Sprint(e), msg) {
				t.Errorf("%s: %v; want an error wrapping %v that says %q", name, e, target, msg)
			}
		}
		t.Logf("%s: %v", name, err)
	}

	// A PID that no process has: above pid_max.
	free := 1 << 22
	if b, err := os.ReadFile("/proc/sys/kernel/pid_max"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			free = n + 1
		}
	}
	check("nonexistent", free, os.ErrNotExist, "no such process")

	check("self", os.Getpid(), ErrSelf, "this process")
	if tids, _ := listTasks(os.Getpid()); len(tids) > 1 {
		for _, tid := range tids {
			if tid != os.Getpid() {
				check("own thread", tid, ErrSelf, fmt.Sprintf("thread %d belongs to this process", tid))
				break
			}
		}
	}

	// A zombie: a child of this process that exited and that nobody has
	// waited for yet.
	z := exec.Command("/bin/true")
	if err := z.Start(); err != nil {
		t.Skipf("no /bin/true: %v", err)
	}
	defer z.Wait()
	zpid := z.Process.Pid
	var zst procStat
	for deadline := time.Now().Add(5 * time.Second); ; {
		st, err := readStat(fmt.Sprintf("/proc/%d/stat", zpid))
		if err == nil && st.state == 'Z' {
			zst = st
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d never became a zombie: %v %c", zpid, err, st.state)
		}
		time.Sleep(time.Millisecond)
	}
	check("zombie", zpid, ErrZombie, fmt.Sprintf("process %d (%s) is a zombie: it has exited and has no stacks", zpid, zst.comm))

	// A kernel thread: kthreadd is PID 2 unless PID namespaces hide it.
	if st, err := readStat("/proc/2/stat"); err == nil && st.flags&pfKthread != 0 {
		check("kernel thread", 2, ErrKernelThread, "process 2 ("+st.comm+") is a kernel thread")
	} else {
		t.Logf("kernel thread: skipped, PID 2 is no kernel thread here (%v)", err)
	}
}

// TestPermissionDenied runs the capture as an unprivileged user (nobody)
// against a process of root's: the error must wrap os.ErrPermission and
// tell what to do.
func TestPermissionDenied(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch to an unprivileged user")
	}
	tg := threadsTarget(t)
	// The test binary's directory is private to root: run a copy.
	dir, err := os.MkdirTemp("", "rewind-live-perm")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := dir + "/live.test"
	if b, err := os.ReadFile(os.Args[0]); err != nil || os.WriteFile(bin, b, 0o755) != nil || os.Chmod(dir, 0o755) != nil {
		t.Fatalf("copying the test binary: %v", err)
	}
	cmd := exec.Command(bin, "-test.run=^TestPermissionChild$", "-test.v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "REWIND_LIVE_PERM_TARGET="+strconv.Itoa(tg.pid), "TMPDIR="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "PERMISSION-OK") {
		t.Fatalf("child output:\n%s", out)
	}
	t.Logf("%s", out)
	checkReleased(t, tg.pid, "S")
}

// TestPermissionChild is the unprivileged side of TestPermissionDenied.
func TestPermissionChild(t *testing.T) {
	arg := os.Getenv("REWIND_LIVE_PERM_TARGET")
	if arg == "" {
		t.Skip("run by TestPermissionDenied")
	}
	pid, _ := strconv.Atoi(arg)
	_, err := Capture(pid, Options{})
	if !errors.Is(err, os.ErrPermission) || !strings.Contains(fmt.Sprint(err), "CAP_SYS_PTRACE") {
		t.Fatalf("Capture as uid %d: %v; want a permission error that mentions CAP_SYS_PTRACE", os.Getuid(), err)
	}
	t.Logf("PERMISSION-OK: %v", err)
}

// TestNoSignalLost sends a signal to a thread between PTRACE_SEIZE and
// PTRACE_INTERRUPT, so that the thread's stop is a signal-delivery-stop:
// the capture must hand the signal back when it detaches (detaching with
// signal 0 would discard it). The program counts the signals it handles.
func TestNoSignalLost(t *testing.T) {
	tg := startTarget(t, true, compileC(t, "sigcount"))
	tids := waitAllState(t, tg.pid, "S", 5*time.Second)
	var target int
	testHookSeized = func(pid int) {
		unix.Tgkill(pid, target, unix.SIGUSR1)
		// Let the thread wake, dequeue the signal and stop for it
		// before the interrupt is requested.
		time.Sleep(2 * time.Millisecond)
	}
	delivery := 0
	testHookDone = func(s *session) {
		for _, th := range s.threads {
			if th.sig == int(unix.SIGUSR1) {
				delivery++
			}
		}
	}
	defer func() { testHookSeized, testHookDone = nil, nil }()
	const n = 20
	for i := 0; i < n; i++ {
		target = tids[1+i%(len(tids)-1)]
		mustCapture(t, tg.pid, Options{MaxStack: -1})
	}
	checkReleased(t, tg.pid, "S")
	t.Logf("%d of %d signals arrived as signal-delivery-stops", delivery, n)
	if delivery == 0 {
		t.Errorf("no signal-delivery-stop seen: the test did not exercise re-injection")
	}
	timeout := time.After(5 * time.Second)
	last := ""
	for last != strconv.Itoa(n) {
		select {
		case l, ok := <-tg.lines:
			if !ok {
				t.Fatalf("program ended; last count %q", last)
			}
			last = l
		case <-timeout:
			t.Fatalf("the program handled %s signals, %d were sent: the capture lost some", last, n)
		}
	}
}

// TestStopTimeout captures a process with a thread in vfork, waiting
// uninterruptibly for its child: that thread cannot stop in time, is
// reported, and the others are captured. Once the child exits the thread
// reaches the stop it was asked for, and the tracer detaches it then: no
// thread stays traced.
func TestStopTimeout(t *testing.T) {
	tg := startTarget(t, true, compileC(t, "vforker"))
	defer endVforks(t, tg.pid)
	defer func(d time.Duration) { StopTimeout = d }(StopTimeout)
	StopTimeout = 100 * time.Millisecond
	var s *Snapshot
	var late *Thread
	for try := 0; try < 5 && late == nil; try++ {
		s = mustCapture(t, tg.pid, Options{})
		for i := range s.Threads {
			th := &s.Threads[i]
			switch {
			case th.Err != nil && strings.Contains(th.Err.Error(), "did not stop"):
				late = th
			case th.Err != nil || len(th.Stack.Data) == 0:
				t.Errorf("thread %d: %v", th.TID, th.Err)
			}
		}
		if late == nil {
			// The vfork thread was between two vforks: try again.
			checkReleased(t, tg.pid, "SDR")
		}
	}
	if late == nil {
		t.Fatalf("the vfork thread always stopped in time")
	}
	t.Logf("thread %d: %v; pause %v", late.TID, late.Err, s.Pause)
	if len(s.Threads) != 4 {
		t.Errorf("%d threads", len(s.Threads))
	}
	// The child sleeps 1.5 s; then the thread stops and the tracer lets
	// it go.
	waitUntraced(t, tg.pid, 5*time.Second)
	checkReleased(t, tg.pid, "SDR")
	// And it goes on vforking: it is not stuck in a stop.
	time.Sleep(1600 * time.Millisecond)
	checkReleased(t, tg.pid, "SDR")
}

// endVforks makes vforker stop vforking and kills its current child, so
// that the child is reaped by vforker rather than orphaned.
func endVforks(t *testing.T, pid int) {
	syscall.Kill(pid, syscall.SIGUSR2)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		kids := childrenOf(pid)
		if len(kids) == 0 {
			return
		}
		for _, k := range kids {
			syscall.Kill(k, syscall.SIGKILL)
		}
	}
	var states []string
	for _, k := range childrenOf(pid) {
		st, _ := readStat("/proc/" + strconv.Itoa(k) + "/stat")
		states = append(states, fmt.Sprintf("%d %c", k, st.state))
	}
	ts, _ := tasks(pid)
	t.Errorf("vforker %d still has children (%s) 5 s after SIGUSR2; its threads:%s", pid, strings.Join(states, ", "), describe(ts))
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readStat("/proc/" + e.Name() + "/stat"); err == nil && st.ppid == pid {
			kids = append(kids, n)
		}
	}
	return kids
}

// TestCheckWaiters checks that the waits that would take a child's
// ptrace stops are seen: wait4 and waitid on its pid (os/exec's pidfd
// wait is covered by TestChildWithConcurrentWaiter), and no false alarm.
func TestCheckWaiters(t *testing.T) {
	for _, kind := range []string{"none", "wait4", "waitid"} {
		cmd := exec.Command("sleep", "10")
		if err := cmd.Start(); err != nil {
			t.Skip(err)
		}
		pid := cmd.Process.Pid
		done := make(chan bool)
		go func() {
			var ws unix.WaitStatus
			var si unix.Siginfo
			switch kind {
			case "wait4":
				unix.Wait4(pid, &ws, 0, nil)
			case "waitid":
				unix.Waitid(unix.P_PID, pid, &si, unix.WEXITED, nil)
			}
			close(done)
		}()
		var err error
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if err = checkWaiters(pid); err != nil || kind == "none" {
				break
			}
		}
		if (err != nil) != (kind != "none") || (err != nil && !errors.Is(err, ErrWaitedChild)) {
			t.Errorf("%s: checkWaiters: %v", kind, err)
		}
		syscall.Kill(pid, syscall.SIGKILL)
		<-done
		if kind == "none" {
			cmd.Wait()
		}
	}
}

// TestMaxPause: a thread that cannot stop for long (vforker's thread waits
// for its vfork child) keeps the others stopped only for Options.MaxPause:
// they are copied and resumed, and the late thread is copied when it stops.
// With a negative MaxPause every thread waits for the late one, as before.
func TestMaxPause(t *testing.T) {
	tg := startTarget(t, true, compileC(t, "vforker"))
	defer endVforks(t, tg.pid)
	defer func(d time.Duration) { StopTimeout = d }(StopTimeout)
	StopTimeout = 3 * time.Second // the child sleeps 1.5 s
	const budget = 20 * time.Millisecond
	capture := func(maxPause time.Duration) (*Snapshot, *Thread) {
		for try := 0; try < 5; try++ {
			s := mustCapture(t, tg.pid, Options{MaxPause: maxPause})
			for i := range s.Threads {
				if th := &s.Threads[i]; th.StopLatency > 100*time.Millisecond {
					return s, th
				}
			}
			// The vfork thread was between two vforks: try again.
			checkReleased(t, tg.pid, "SDR")
		}
		t.Fatalf("the vfork thread always stopped at once")
		return nil, nil
	}
	s, late := capture(budget)
	if !s.Staggered {
		t.Errorf("a thread stopped %v late, and the capture is not staggered", late.StopLatency)
	}
	if _, ok := late.Regs.PC(); late.Err != nil || len(late.Stack.Data) == 0 || !ok {
		t.Errorf("late thread %d: err %v, %d stack bytes", late.TID, late.Err, len(late.Stack.Data))
	}
	for _, th := range s.Threads {
		if th.Err != nil || len(th.Stack.Data) == 0 {
			t.Errorf("thread %d: err %v, %d stack bytes", th.TID, th.Err, len(th.Stack.Data))
		}
		// The budget, plus copying, plus a loaded machine's scheduling.
		if th.Stopped > 10*budget {
			t.Errorf("thread %d stopped %v, budget %v", th.TID, th.Stopped, budget)
		}
	}
	if s.Pause > 10*budget {
		t.Errorf("pause %v, budget %v", s.Pause, budget)
	}
	t.Logf("staggered: late thread %d stopped after %v; pause %v", late.TID, late.StopLatency, s.Pause)
	checkReleased(t, tg.pid, "SDR")

	s, late = capture(-1)
	if s.Staggered {
		t.Error("MaxPause -1 staggered the capture")
	}
	for _, th := range s.Threads {
		if th.TID != late.TID && th.Stopped < late.StopLatency-th.StopLatency {
			t.Errorf("thread %d stopped %v, resumed before the late thread stopped (%v)", th.TID, th.Stopped, late.StopLatency)
		}
	}
	t.Logf("one instant: late thread %d stopped after %v; pause %v", late.TID, late.StopLatency, s.Pause)
	checkReleased(t, tg.pid, "SDR")
}
