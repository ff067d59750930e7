package live

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
)

// threadsCount is how many threads the threads fixture runs (main and 16
// workers); it creates and ends none after "ready".
const threadsCount = 17

// childProc is this test binary run again as another capturing process
// (one test function of it, selected by -test.run, acting on environment
// variables). It prints lines prefixed "CHILD " and reads commands on
// stdin.
type childProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // the CHILD lines, prefix removed; closed at EOF
	once  sync.Once
}

func startChild(t *testing.T, test string, env ...string) *childProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
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
	c := &childProc{cmd: cmd, stdin: stdin, lines: make(chan string, 1024)}
	t.Cleanup(c.end)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), "CHILD "); ok {
				c.lines <- l
			}
		}
		close(c.lines)
	}()
	return c
}

// expect waits for the child's next line and fails t unless it is want.
func (c *childProc) expect(t *testing.T, want string) {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok || l != want {
			t.Fatalf("child %d said %q (open %v), want %q", c.cmd.Process.Pid, l, ok, want)
		}
	case <-time.After(fixture.ReadyTimeout):
		t.Fatalf("child %d did not say %q within %v", c.cmd.Process.Pid, want, fixture.ReadyTimeout)
	}
}

// end closes the child's stdin (the holder lets go then), waits for it,
// and kills it if it has not exited after a generous time.
func (c *childProc) end() {
	c.once.Do(func() {
		c.stdin.Close()
		done := make(chan bool)
		go func() {
			select {
			case <-done:
			case <-time.After(time.Minute):
				c.cmd.Process.Kill()
			}
		}()
		c.cmd.Wait()
		close(done)
	})
}

// TestBusyHolderChild is the child side of the busy tests: it stops the
// threads $REWIND_LIVE_BUSY_TIDS of process $REWIND_LIVE_BUSY_PID with
// WithStopped, says "stopped", and keeps them stopped until its stdin is
// closed.
func TestBusyHolderChild(t *testing.T) {
	arg := os.Getenv("REWIND_LIVE_BUSY_PID")
	if arg == "" {
		t.Skip("run by the busy tests")
	}
	pid, _ := strconv.Atoi(arg)
	var tids []int
	for _, f := range strings.Split(os.Getenv("REWIND_LIVE_BUSY_TIDS"), ",") {
		tid, _ := strconv.Atoi(f)
		tids = append(tids, tid)
	}
	err := WithStopped(pid, Options{Threads: tids, MaxStopped: -1}, func(s *Snapshot) error {
		for _, th := range s.Threads {
			if th.Err != nil {
				return th.Err
			}
		}
		fmt.Println("CHILD stopped")
		io.Copy(io.Discard, os.Stdin)
		return nil
	})
	if err != nil {
		fmt.Println("CHILD error:", err)
	}
	fmt.Println("CHILD released")
}

// holdThreads has a child process stop threads of the threads fixture
// (the last n, so that a capture seizes others before it meets one) and
// returns it with the held TIDs.
func holdThreads(t *testing.T, tg *testProc, n int) (*childProc, []int) {
	t.Helper()
	if len(tg.tids) != threadsCount {
		t.Fatalf("fixture has %d threads, want %d", len(tg.tids), threadsCount)
	}
	held := tg.tids[len(tg.tids)-n:]
	var s []string
	for _, tid := range held {
		s = append(s, strconv.Itoa(tid))
	}
	c := startChild(t, "TestBusyHolderChild", "REWIND_LIVE_BUSY_PID="+strconv.Itoa(tg.pid), "REWIND_LIVE_BUSY_TIDS="+strings.Join(s, ","))
	c.expect(t, "stopped")
	return c, held
}

// checkOthersReleased checks that the threads of pid outside held are
// neither traced nor stopped (a failed capture let go of what it held).
func checkOthersReleased(t *testing.T, pid int, held []int) {
	t.Helper()
	deadline := time.Now().Add(fixture.ReadyTimeout)
	for {
		ts, err := tasks(pid)
		if err != nil {
			t.Fatal(err)
		}
		ok := true
		for _, x := range ts {
			if slices.Contains(held, x.tid) {
				continue
			}
			if x.tracer != 0 {
				t.Fatalf("thread %d still traced after the failed capture:%s", x.tid, describe(ts))
			}
			ok = ok && x.state == 'S'
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("threads not all asleep after the failed capture:%s", describe(ts))
		}
		time.Sleep(time.Millisecond)
	}
}

// TestBusyFailsClearly: while another rewind process holds some threads,
// a capture that may not wait fails, saying which rewind dumps the
// process, and lets go of the threads it had seized; it never returns a
// snapshot without them. One that may wait a little says how long it
// waited.
func TestBusyFailsClearly(t *testing.T) {
	tg := threadsTarget(t)
	holder, held := holdThreads(t, tg, 5)
	want := fmt.Sprintf("live: process %d is being dumped by rewind (PID %d)", tg.pid, holder.cmd.Process.Pid)
	for _, wait := range []time.Duration{-1, 20 * time.Millisecond} {
		called := false
		snap, err := Capture(tg.pid, Options{BusyWait: wait})
		werr := WithStopped(tg.pid, Options{BusyWait: wait}, func(*Snapshot) error { called = true; return nil })
		if called {
			t.Errorf("BusyWait %v: WithStopped called fn", wait)
		}
		if snap != nil {
			t.Errorf("BusyWait %v: Capture returned a snapshot of %d threads", wait, len(snap.Threads))
		}
		for _, e := range []error{err, werr} {
			if !errors.Is(e, ErrBusy) || !errors.Is(e, ErrTraced) || !strings.HasPrefix(fmt.Sprint(e), want) {
				t.Errorf("BusyWait %v: %v; want ErrBusy saying %q", wait, e, want)
			}
			if waited := strings.Contains(fmt.Sprint(e), "within"); waited != (wait > 0) {
				t.Errorf("BusyWait %v: %v: says how long it waited: %v", wait, e, waited)
			}
		}
		t.Logf("BusyWait %v: %v", wait, err)
		checkOthersReleased(t, tg.pid, held)
	}
	holder.end()
	checkReleased(t, tg.pid, "S")
}

// TestBusyWaits: a capture that finds threads held by another rewind
// waits until that one lets go (here: the test makes it let go once the
// capture waits), then captures every thread.
func TestBusyWaits(t *testing.T) {
	tg := threadsTarget(t)
	holder, _ := holdThreads(t, tg, 5)
	waits := 0
	testHookBusy = func(tracer int) {
		waits++
		if tracer != holder.cmd.Process.Pid {
			t.Errorf("waiting for PID %d, the holder is %d", tracer, holder.cmd.Process.Pid)
		}
		holder.stdin.Close()
	}
	defer func() { testHookBusy = nil }()
	// The holder lets go only once told, whatever the load: the wait
	// bound only has to be long enough for it to run.
	s := mustCapture(t, tg.pid, Options{BusyWait: time.Minute})
	if waits == 0 {
		t.Fatal("the capture did not wait for the holder")
	}
	checkAll(t, s)
	holder.end()
	checkReleased(t, tg.pid, "S")
}

// checkAll checks that s holds every thread of the threads fixture with
// its registers and stack.
func checkAll(t *testing.T, s *Snapshot) {
	t.Helper()
	n := 0
	for _, th := range s.Threads {
		if th.Err == nil && len(th.Stack.Data) > 0 {
			n++
		} else {
			t.Errorf("thread %d: %v (stack %d bytes)", th.TID, th.Err, len(th.Stack.Data))
		}
	}
	if n != threadsCount {
		t.Errorf("%d threads captured, want %d", n, threadsCount)
	}
}

// TestConcurrentCaptureChild is the child side of
// TestConcurrentCaptures: once told to (a line on stdin) it captures
// process $REWIND_LIVE_CONC_PID $REWIND_LIVE_CONC_ROUNDS times, with
// Capture or WithStopped ($REWIND_LIVE_CONC_MODE), waiting for other
// captures or not ($REWIND_LIVE_CONC_WAIT), and prints one line per
// capture.
func TestConcurrentCaptureChild(t *testing.T) {
	arg := os.Getenv("REWIND_LIVE_CONC_PID")
	if arg == "" {
		t.Skip("run by TestConcurrentCaptures")
	}
	pid, _ := strconv.Atoi(arg)
	rounds, _ := strconv.Atoi(os.Getenv("REWIND_LIVE_CONC_ROUNDS"))
	opt := Options{}
	if os.Getenv("REWIND_LIVE_CONC_WAIT") == "none" {
		opt.BusyWait = -1
	}
	fmt.Println("CHILD ready")
	bufio.NewReader(os.Stdin).ReadString('\n')
	for i := 0; i < rounds; i++ {
		var s *Snapshot
		var err error
		if os.Getenv("REWIND_LIVE_CONC_MODE") == "lazy" {
			err = WithStopped(pid, opt, func(ws *Snapshot) error { s = ws; return nil })
		} else {
			s, err = Capture(pid, opt)
		}
		if err != nil {
			fmt.Printf("CHILD err %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
			continue
		}
		ok, slow := 0, 0
		var other []string
		for _, th := range s.Threads {
			switch {
			case th.Err == nil:
				ok++
			case strings.Contains(th.Err.Error(), "did not stop within"):
				slow++ // StopTimeout on a loaded machine: reported, not fatal
			default:
				other = append(other, fmt.Sprintf("%d: %v", th.TID, th.Err))
			}
		}
		fmt.Printf("CHILD ok %d %d %d %d %s\n", len(s.Threads), ok, slow, len(other), strings.Join(other, "; "))
	}
}

// TestConcurrentCaptures runs four capturing processes against one
// threads fixture at once, 20 captures each: two wait for one another
// (the default BusyWait), two do not; two use Capture, two WithStopped.
// Every capture has every thread, or fails saying which other rewind
// process holds it; and the fixture is left running, untraced.
func TestConcurrentCaptures(t *testing.T) {
	tg := threadsTarget(t)
	const rounds = 20
	var kids []*childProc
	pids := map[int]bool{}
	for i := 0; i < 4; i++ {
		mode, wait := []string{"capture", "lazy"}[i%2], []string{"default", "none"}[i/2]
		c := startChild(t, "TestConcurrentCaptureChild", "REWIND_LIVE_CONC_PID="+strconv.Itoa(tg.pid),
			"REWIND_LIVE_CONC_ROUNDS="+strconv.Itoa(rounds), "REWIND_LIVE_CONC_MODE="+mode, "REWIND_LIVE_CONC_WAIT="+wait)
		kids = append(kids, c)
		pids[c.cmd.Process.Pid] = true
	}
	for _, c := range kids {
		c.expect(t, "ready")
	}
	for _, c := range kids {
		io.WriteString(c.stdin, "go\n")
	}
	busyRE := regexp.MustCompile(fmt.Sprintf(`^live: process %d is being dumped by rewind \(PID (\d+)\)`, tg.pid))
	var ok, busy, slow int
	for i, c := range kids {
		got := 0
		for l := range c.lines {
			got++
			if rest, found := strings.CutPrefix(l, "err "); found {
				other := 0
				if m := busyRE.FindStringSubmatch(rest); m != nil {
					other, _ = strconv.Atoi(m[1])
				}
				if !pids[other] || other == c.cmd.Process.Pid {
					t.Errorf("child %d: capture failed with %q; want one saying another child holds the threads", i, rest)
				}
				busy++
				continue
			}
			var n, captured, late, other int
			if k, _ := fmt.Sscanf(l, "ok %d %d %d %d", &n, &captured, &late, &other); k != 4 {
				t.Errorf("child %d said %q", i, l)
				continue
			}
			if other != 0 || n != threadsCount || captured+late != threadsCount {
				t.Errorf("child %d: a capture of %d threads holds %d (and %d slow to stop): %s", i, n, captured, late, l)
			}
			ok++
			slow += late
		}
		c.end()
		if got != rounds {
			t.Errorf("child %d reported %d captures of %d", i, got, rounds)
		}
	}
	t.Logf("%d complete captures, %d failed as busy, %d threads slow to stop", ok, busy, slow)
	checkReleased(t, tg.pid, "S")
}

// killWhenSeized makes the next captures kill their target once they
// have seized its threads, before interrupting them, and wait until every
// thread has exited.
func killWhenSeized(t *testing.T) {
	testHookSeized = func(pid int) {
		syscall.Kill(pid, syscall.SIGKILL)
		for deadline := time.Now().Add(time.Minute); !processGone(pid); {
			if time.Now().After(deadline) {
				t.Errorf("process %d still there a minute after SIGKILL", pid)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	t.Cleanup(func() { testHookSeized = nil })
}

// checkReaped checks that the killed target can be reaped: a dead tracee
// left unreaped by the tracer would keep its process from ending.
func checkReaped(t *testing.T, tg *testProc) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- tg.cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("target ended with %v, want killed by SIGKILL", err)
		}
	case <-time.After(fixture.ReadyTimeout):
		t.Fatalf("target not reaped within %v of the capture", fixture.ReadyTimeout)
	}
	tg.reapOnce.Do(func() {})
}

// TestExitDuringAttach: a target that dies after its threads were seized
// and before they stopped leaves nothing captured: Capture and
// WithStopped must fail, saying the process exited, not return an empty
// snapshot (or call fn with one).
func TestExitDuringAttach(t *testing.T) {
	for _, mode := range []string{"capture", "lazy"} {
		t.Run(mode, func(t *testing.T) {
			tg := threadsTarget(t)
			killWhenSeized(t)
			var err error
			if mode == "lazy" {
				err = WithStopped(tg.pid, Options{}, func(s *Snapshot) error {
					t.Errorf("fn called with %d threads", len(s.Threads))
					return nil
				})
			} else {
				var s *Snapshot
				s, err = Capture(tg.pid, Options{})
				if s != nil {
					t.Errorf("a snapshot of %d threads", len(s.Threads))
				}
			}
			want := fmt.Sprintf("live: process %d exited during the capture", tg.pid)
			if !errors.Is(err, ErrExited) || !strings.HasPrefix(fmt.Sprint(err), want) {
				t.Errorf("%v; want ErrExited saying %q", err, want)
			}
			t.Logf("%v", err)
			checkReaped(t, tg)
		})
	}
}

// TestKilledWhileAttaching kills the target from another goroutine at an
// arbitrary point of a capture, many times: a capture either holds at
// least one thread (every other one having exited) or fails saying the
// process exited (or no longer exists); it never blames permissions, and
// the target is always reaped.
func TestKilledWhileAttaching(t *testing.T) {
	exe := fixture.Build(t, "threads", fixture.Variants[3])
	needAMD64(t)
	var ok, failed int
	for i := 0; i < 15; i++ {
		tg := startTarget(t, false, exe)
		lazy := i%2 == 1
		var wg sync.WaitGroup
		wg.Add(1)
		go func(spins int) {
			defer wg.Done()
			for j := 0; j < spins; j++ {
				runtime.Gosched()
			}
			syscall.Kill(tg.pid, syscall.SIGKILL)
		}(rand.Intn(200))
		var s *Snapshot
		var err error
		if lazy {
			err = WithStopped(tg.pid, Options{}, func(ws *Snapshot) error { s = ws; return nil })
		} else {
			s, err = Capture(tg.pid, Options{})
		}
		wg.Wait()
		switch {
		case err == nil:
			ok++
			n := 0
			for _, th := range s.Threads {
				if th.Err == nil {
					n++
				} else if !isGone(th.Err) {
					t.Errorf("round %d: thread %d: %v", i, th.TID, th.Err)
				}
			}
			if n == 0 {
				t.Errorf("round %d: success with no thread captured", i)
			}
		case errors.Is(err, ErrExited), errors.Is(err, os.ErrNotExist), errors.Is(err, ErrZombie):
			failed++
			if errors.Is(err, os.ErrPermission) || errors.Is(err, ErrStoppedTooLong) {
				t.Errorf("round %d: %v", i, err)
			}
		default:
			t.Errorf("round %d: %v; want success or an error saying the process exited", i, err)
		}
		checkReaped(t, tg)
	}
	t.Logf("%d captures succeeded before the kill, %d failed", ok, failed)
}

// TestLazyTargetKilled: a process killed while WithStopped's function
// unwinds it, and which then outlasts MaxStopped, is reported as having
// exited, not as unwinding that took too long.
func TestLazyTargetKilled(t *testing.T) {
	tg := threadsTarget(t)
	block := make(chan bool)
	defer close(block)
	err := WithStopped(tg.pid, Options{MaxStopped: 50 * time.Millisecond}, func(s *Snapshot) error {
		syscall.Kill(s.PID, syscall.SIGKILL)
		for !processGone(s.PID) {
			time.Sleep(time.Millisecond)
		}
		<-block // past MaxStopped
		return nil
	})
	if !errors.Is(err, ErrExited) || errors.Is(err, ErrStoppedTooLong) || !strings.Contains(fmt.Sprint(err), fmt.Sprintf("process %d exited", tg.pid)) {
		t.Errorf("WithStopped = %v; want ErrExited saying the process exited", err)
	}
	t.Logf("%v", err)
	checkReaped(t, tg)
}

// TestStuckThreadRecaptured: a thread an earlier capture interrupted and
// that has not stopped yet (in vfork, waiting for its child) is still
// held by this process's tracer; a capture meanwhile reports it, and
// does not fail as if another tracer held it.
func TestStuckThreadRecaptured(t *testing.T) {
	tg := startTarget(t, true, compileC(t, "vforker"))
	defer endVforks(t, tg.pid)
	defer func(d time.Duration) { StopTimeout = d }(StopTimeout)
	StopTimeout = 100 * time.Millisecond
	stuck := 0
	for try := 0; try < 10 && stuck == 0; try++ {
		s := mustCapture(t, tg.pid, Options{})
		for _, th := range s.Threads {
			if th.Err != nil && strings.Contains(th.Err.Error(), "did not stop") {
				stuck = th.TID
			}
		}
	}
	if stuck == 0 {
		t.Fatal("the vfork thread always stopped in time")
	}
	// Whether or not it has stopped (and been let go) since, the next
	// capture succeeds.
	s := mustCapture(t, tg.pid, Options{})
	th := s.Thread(stuck)
	if th == nil {
		t.Fatalf("thread %d missing", stuck)
	}
	t.Logf("thread %d: %v", stuck, th.Err)
	waitUntraced(t, tg.pid, time.Minute)
	checkReleased(t, tg.pid, "SDR")
}
