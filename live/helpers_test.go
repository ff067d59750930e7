package live

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
)

func TestMain(m *testing.M) {
	if pid := os.Getenv("REWIND_LIVE_HOLD"); pid != "" {
		os.Exit(holdMain(pid, os.Getenv("REWIND_LIVE_HOLD_MODE")))
	}
	os.Exit(fixture.Main(m))
}

// holdMain is the child side of TestKilledMidCapture: it captures the
// process, announces on stdout when every thread is stopped, and sleeps
// with them stopped until it is killed.
func holdMain(arg, mode string) int {
	pid, err := strconv.Atoi(arg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	hold := func() {
		fmt.Println("stopped")
		time.Sleep(time.Minute)
	}
	if mode == "lazy" {
		err = WithStopped(pid, Options{}, func(*Snapshot) error { hold(); return nil })
	} else {
		testHookStopped = func(int) { hold() }
		// Every thread stopped at once, however long a loaded
		// machine takes to schedule them.
		_, err = Capture(pid, Options{MaxPause: -1})
	}
	fmt.Fprintln(os.Stderr, "hold: capture returned:", err)
	return 3
}

// testProc is a running test program. It is started without a goroutine
// waiting for it: the kernel reports the main thread's ptrace stops to
// any thread of the tracer's process that waits for that child (see
// TestChildWithConcurrentWaiter), and fixture.Start keeps one waiting.
type testProc struct {
	cmd  *exec.Cmd
	pid  int
	tids []int
	exe  string
	// lines receives what the program prints after "ready".
	lines chan string

	reapOnce sync.Once
}

// startTarget runs exe, waits until it prints "ready" and (unless busy)
// until every thread is asleep, and registers a cleanup that kills and
// reaps it.
func startTarget(t testing.TB, busy bool, exe string, args ...string) *testProc {
	t.Helper()
	cmd := exec.Command(exe, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tg := &testProc{cmd: cmd, pid: cmd.Process.Pid, exe: exe, lines: make(chan string, 1024)}
	t.Cleanup(tg.kill)
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == "ready" {
				ready <- true
				break
			}
		}
		close(ready)
		for sc.Scan() {
			select {
			case tg.lines <- sc.Text():
			default:
			}
		}
		close(tg.lines)
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("%s exited before it was ready", exe)
		}
	case <-time.After(fixture.ReadyTimeout):
		t.Fatalf("%s not ready after %v", exe, fixture.ReadyTimeout)
	}
	if !busy {
		tg.tids = waitAllState(t, tg.pid, "S", fixture.ReadyTimeout)
	}
	return tg
}

// kill kills and reaps the target (once).
func (tg *testProc) kill() {
	tg.reapOnce.Do(func() {
		syscall.Kill(tg.pid, syscall.SIGKILL)
		tg.cmd.Wait()
	})
}

// task is one thread's scheduler state and tracer, from /proc.
type task struct {
	tid    int
	state  byte
	tracer int
}

// tasks lists the threads of pid with their state and TracerPid, sorted.
func tasks(pid int) ([]task, error) {
	tids, err := listTasks(pid)
	if err != nil {
		return nil, err
	}
	sort.Ints(tids)
	var out []task
	for _, tid := range tids {
		st, err := readStat(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
		if err != nil {
			continue // exited meanwhile
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/status", pid, tid))
		if err != nil {
			continue
		}
		tracer, _ := strconv.Atoi(statusField(b, "TracerPid"))
		out = append(out, task{tid: tid, state: st.state, tracer: tracer})
	}
	return out, nil
}

func describe(ts []task) string {
	var b strings.Builder
	for _, x := range ts {
		fmt.Fprintf(&b, " %d:%c", x.tid, x.state)
		if x.tracer != 0 {
			fmt.Fprintf(&b, "(traced by %d)", x.tracer)
		}
	}
	return b.String()
}

// waitAllState polls until every thread of pid is in one of states, and
// returns the TIDs. It fails t after timeout.
func waitAllState(t testing.TB, pid int, states string, timeout time.Duration) []int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ts, err := tasks(pid)
		if err != nil {
			t.Fatalf("pid %d: %v", pid, err)
		}
		ok := len(ts) > 0
		var tids []int
		for _, x := range ts {
			ok = ok && strings.IndexByte(states, x.state) >= 0
			tids = append(tids, x.tid)
		}
		if ok {
			return tids
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d: threads not all in state %q after %v:%s", pid, states, timeout, describe(ts))
		}
		time.Sleep(time.Millisecond)
	}
}

// checkReleased checks that no thread of pid is traced any more (at once:
// PTRACE_DETACH clears the tracer synchronously) and that none stays in a
// stop: every thread is back in one of states (the wake-up after detach
// completes asynchronously, so this is polled, and a thread left stopped
// fails after the timeout).
func checkReleased(t testing.TB, pid int, states string) {
	t.Helper()
	ts, err := tasks(pid)
	if err != nil {
		t.Fatalf("pid %d: %v", pid, err)
	}
	for _, x := range ts {
		if x.tracer != 0 {
			t.Errorf("pid %d: thread %d still traced by %d after the capture:%s", pid, x.tid, x.tracer, describe(ts))
		}
	}
	waitAllState(t, pid, states, fixture.ReadyTimeout)
}

// compileC compiles testdata/name.c into a temporary directory.
func compileC(t testing.TB, name string) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skipf("gcc not installed: %v", err)
	}
	out := filepath.Join(t.TempDir(), name)
	b, err := exec.Command("gcc", "-O2", "-g", "-pthread", "-Wall", "-o", out, filepath.Join("testdata", name+".c")).CombinedOutput()
	if err != nil {
		t.Fatalf("gcc %s.c: %v\n%s", name, err, b)
	}
	return out
}

func mustCapture(t testing.TB, pid int, opt Options) *Snapshot {
	t.Helper()
	s, err := Capture(pid, opt)
	if err != nil {
		t.Fatalf("Capture(%d): %v", pid, err)
	}
	return s
}

func isGone(err error) bool { return errors.Is(err, errThreadGone) }

// waitUntraced waits until no thread of pid has a tracer, failing the
// test if one still has after within.
func waitUntraced(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(10 * time.Millisecond) {
		ts, _ := tasks(pid)
		traced := false
		for _, x := range ts {
			traced = traced || x.tracer != 0
		}
		if !traced {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still traced %v later:%s", within, describe(ts))
		}
	}
}
