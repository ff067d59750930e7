package taskiter

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/live"
)

// churn is a process whose threads never hold still. "threads": 8
// threads block for ever while the main thread creates and joins short
// lived threads without end (threads die while the iterator walks).
// "exec N": the main thread starts 8 threads that block, then execs
// itself with N-1 (the kernel kills the others and the leader takes the
// exec'ing thread's place), down to 0, when it prints "done" and blocks.
// "exit": 8 blocked threads, and the process exits when a byte arrives
// on stdin. Each mode prints "ready" once its threads run.
const churn = `#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
static void *block(void *a) {
	(void)a;
	pthread_mutex_lock(&mu);
	for (;;)
		pthread_cond_wait(&never, &mu);
}
static void *brief(void *a) { return a; }
static void blockers(void) {
	pthread_t t;
	for (int i = 0; i < 8; i++)
		pthread_create(&t, 0, block, 0);
}
int main(int argc, char **argv) {
	if (argc < 2)
		return 2;
	blockers();
	if (!strcmp(argv[1], "threads")) {
		printf("ready\n");
		fflush(stdout);
		for (;;) {
			pthread_t t[4];
			for (int i = 0; i < 4; i++)
				pthread_create(&t[i], 0, brief, 0);
			for (int i = 0; i < 4; i++)
				pthread_join(t[i], 0);
		}
	}
	if (!strcmp(argv[1], "exec")) {
		int n = atoi(argv[2]);
		if (n == 0) {
			printf("done\n");
			fflush(stdout);
			pause();
		}
		if (argc == 3) {
			printf("ready\n");
			fflush(stdout);
		}
		char next[16];
		snprintf(next, sizeof next, "%d", n - 1);
		execl("/proc/self/exe", argv[0], "exec", next, "again", (char *)0);
		printf("exec-failed:%d\n", errno);
		fflush(stdout);
		return 1;
	}
	printf("ready\n");
	fflush(stdout);
	char c;
	read(0, &c, 1);
	return 0;
}
`

// checkThreads reads process pid's threads and checks the records: an
// error is a failure; a thread of another process, or a record without a
// thread id, too.
func checkThreads(t *testing.T, it *Iter, pid int) []Thread {
	t.Helper()
	ths, err := it.Threads(pid)
	if err != nil {
		t.Fatalf("reading the threads of %d: %v", pid, err)
	}
	for _, th := range ths {
		if th.TID <= 0 {
			t.Fatalf("a record with thread id %d", th.TID)
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, th.TID)); err == nil && !strings.HasPrefix(string(b), fmt.Sprint(th.TID)+" ") {
			t.Fatalf("thread %d: its stat reads %q", th.TID, b)
		}
	}
	return ths
}

// TestThreadsDyingMidWalk (issue 42 item 4): the iterator reads, again
// and again, a process whose threads are created and die while it walks
// them, and a capture reading the blocked ones in place copies the
// process each time: no error, no torn record, the 8 threads that block
// always among those read.
func TestThreadsDyingMidWalk(t *testing.T) {
	testingRoot(t)
	it, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	p := fixture.Start(t, fixture.BuildC(t, churn), "threads")
	// Not every thread sleeps: fixture.Start waits for "ready" only.
	for i := 0; i < 200; i++ {
		ths := checkThreads(t, it, p.PID)
		blocked := 0
		for _, th := range ths {
			if th.Blocked() && th.TID != p.PID {
				blocked++
			}
		}
		if blocked < 8 {
			t.Fatalf("read %d: %d blocked threads of %d, want the 8 that block for ever", i, blocked, len(ths))
		}
	}
	for i := 0; i < 20; i++ {
		snap, err := live.Capture(p.PID, live.Options{BlockedThreads: it.Blocked})
		if err != nil {
			t.Fatalf("capture %d: %v", i, err)
		}
		inPlace := 0
		for _, th := range snap.Threads {
			if th.Asleep && th.Err == nil && len(th.Stack.Data) > 0 {
				inPlace++
			}
		}
		if inPlace < 8 {
			t.Fatalf("capture %d: %d threads read in place, want at least the 8 that block", i, inPlace)
		}
	}
}

// startPlain starts exe with args, its stdin a pipe, and waits for its
// first line ("ready"), without fixture.Start's wait for every thread to
// sleep (these do not).
func startPlain(t *testing.T, exe string, args ...string) (*exec.Cmd, io.WriteCloser, <-chan string) {
	t.Helper()
	cmd := exec.Command(exe, args...)
	in, err := cmd.StdinPipe()
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
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		b := make([]byte, 256)
		for {
			n, err := out.Read(b)
			for _, l := range strings.Fields(string(b[:n])) {
				lines <- l
			}
			if err != nil {
				return
			}
		}
	}()
	select {
	case l := <-lines:
		if l != "ready" {
			t.Fatalf("%s printed %q", exe, l)
		}
	case <-time.After(fixture.ReadyTimeout):
		t.Fatalf("%s did not print ready", exe)
	}
	return cmd, in, lines
}

// TestThreadsExecMidWalk: the iterator reads a process again and again
// while it execs itself 30 times (each exec kills its 8 other threads):
// every read succeeds, and after the last exec it reads the new image's
// threads, all blocked. (Captures in the middle of those execs are not
// tested here: they sometimes end with the target dead, before and
// after the in-place read; see issue 42's notes.)
func TestThreadsExecMidWalk(t *testing.T) {
	testingRoot(t)
	it, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	cmd, _, lines := startPlain(t, fixture.BuildC(t, churn), "exec", "30")
	pid := cmd.Process.Pid
	reads, captures := 0, 0
	for done := false; !done; {
		select {
		case l := <-lines:
			done = l == "done"
			if !done {
				if l == "" {
					t.Fatalf("the process ended: %v", cmd.Wait())
				}
				t.Fatalf("printed %q", l)
			}
		default:
		}
		checkThreads(t, it, pid)
		reads++
		if _, err := live.Capture(pid, live.Options{BlockedThreads: it.Blocked}); err != nil && !errors.Is(err, live.ErrExited) {
			t.Fatalf("capture during the execs: %v", err)
		}
		if _, err := live.Capture(pid, live.Options{}); err != nil && !errors.Is(err, live.ErrExited) {
			t.Logf("stopping capture during the execs: %v", err)
		}
		captures += 2
	}
	// After the last exec: the 8 new threads and the leader, blocked.
	deadline := time.Now().Add(fixture.ReadyTimeout)
	for {
		ths := checkThreads(t, it, pid)
		blocked := 0
		for _, th := range ths {
			if th.Blocked() {
				blocked++
			}
		}
		if blocked == 9 && len(ths) == 9 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the execs: %d threads, %d blocked; want 9, all", len(ths), blocked)
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("%d reads, %d captures during the execs", reads, captures)
}

// TestThreadsProcessExits: the iterator reads a process in a loop while
// it exits: every read succeeds, with its threads or, once gone, none.
func TestThreadsProcessExits(t *testing.T) {
	testingRoot(t)
	it, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	exe := fixture.BuildC(t, churn)
	for round := 0; round < 5; round++ {
		cmd, in, _ := startPlain(t, exe, "exit")
		pid := cmd.Process.Pid
		waited := make(chan error, 1)
		in.Write([]byte{'x'})
		go func() { waited <- cmd.Wait() }()
		saw, empty := 0, false
		for !empty {
			n := len(checkThreads(t, it, pid))
			if n > 0 {
				saw++
			}
			select {
			case err := <-waited:
				if err != nil {
					t.Fatalf("the process ended with %v", err)
				}
				// Reaped: no thread of it is left to read.
				if n := len(checkThreads(t, it, pid)); n != 0 {
					t.Fatalf("%d threads read of a process reaped", n)
				}
				empty = true
			default:
			}
		}
		if _, err := live.Capture(pid, live.Options{BlockedThreads: it.Blocked}); err == nil {
			t.Errorf("a capture of the exited process %d succeeded", pid)
		}
		t.Logf("round %d: %d reads with threads while it exited", round, saw)
	}
}
