package clitest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
)

// checkUntraced checks that no thread of pid is traced (TracerPid 0) and,
// through WaitBlocked, that every one is asleep again, none left stopped.
func checkUntraced(t *testing.T, p *fixture.Proc) {
	t.Helper()
	paths, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", p.PID))
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err == nil && !strings.Contains(string(b), "\nTracerPid:\t0\n") {
			t.Errorf("%s: still traced after the dumps:\n%s", path, b)
		}
	}
	p.WaitBlocked(t)
}

// TestConcurrentDumps runs four `rewind dump` of one threads fixture at
// once, ten times (one of the four with --lazy): each dump prints every
// one of the 17 threads, or fails saying which other rewind is dumping the
// process; none exits 0 with threads missing.
func TestConcurrentDumps(t *testing.T) {
	p := fixture.Start(t, fixture.Build(t, "threads", fixture.Variants[3]))
	busy := regexp.MustCompile(fmt.Sprintf(`rewind dump: live: process %d is being dumped by rewind \(PID \d+\)`, p.PID))
	var ok, failed int
	for round := 0; round < 10; round++ {
		type result struct {
			out, errOut string
			code        int
		}
		res := make([]result, 4)
		var wg sync.WaitGroup
		for i := range res {
			args := []string{"dump", strconv.Itoa(p.PID)}
			if i == 3 {
				args = append(args, "--lazy")
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				var r result
				r.out, r.errOut, r.code = run(t, args...)
				res[i] = r
			}()
		}
		wg.Wait()
		for i, r := range res {
			switch {
			case r.code == 0:
				ok++
				if n := strings.Count(r.out, "\nTID "); n != 17 || strings.Contains(r.errOut, "warning: thread") {
					t.Errorf("round %d, dump %d: exit 0 with %d threads of 17:\n%s", round, i, n, r.errOut)
				}
			case busy.MatchString(r.errOut):
				failed++
			default:
				t.Errorf("round %d, dump %d: exit %d, stderr %q; want every thread or a failure naming the other rewind", round, i, r.code, r.errOut)
			}
		}
	}
	t.Logf("%d complete dumps, %d failed as busy", ok, failed)
	checkUntraced(t, p)
}

// traced reports whether a thread of pid is traced now.
func traced(pid int) bool {
	paths, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	for _, path := range paths {
		if b, err := os.ReadFile(path); err == nil && !strings.Contains(string(b), "\nTracerPid:\t0\n") {
			return true
		}
	}
	return false
}

// TestDumpKilledTarget kills the target while `rewind dump` (with and
// without --lazy) runs, once a thread is seen traced (when that is seen
// in time, the kill lands in the capture): a dump
// that exits 0 holds at least one thread, one that fails says the process
// exited (or is gone), and --lazy never blames slow unwinding.
func TestDumpKilledTarget(t *testing.T) {
	exe := fixture.Build(t, "threads", fixture.Variants[3])
	exited := regexp.MustCompile(`exited during the capture|exited while its stopped threads|no such process|is a zombie`)
	for i := 0; i < 8; i++ {
		p := fixture.Start(t, exe)
		args := []string{"dump", strconv.Itoa(p.PID)}
		if i%2 == 1 {
			args = append(args, "--lazy")
		}
		cmd := exec.Command(rewindBin, args...)
		var o, e strings.Builder
		cmd.Stdout, cmd.Stderr = &o, &e
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill it as soon as a thread is seen traced (mid-capture), or
		// once the dump has ended if that was never seen.
		done := make(chan bool)
		killed := make(chan bool)
		go func() {
			defer close(killed)
			for {
				select {
				case <-done:
					syscall.Kill(p.PID, syscall.SIGKILL)
					return
				default:
				}
				if traced(p.PID) {
					syscall.Kill(p.PID, syscall.SIGKILL)
					return
				}
			}
		}()
		err := cmd.Wait()
		close(done)
		<-killed
		n := strings.Count(o.String(), "\nTID ")
		switch {
		case err == nil && n == 0:
			t.Errorf("%v: exit 0 with no thread:\n%s%s", args, o.String(), e.String())
		case err != nil && (!exited.MatchString(e.String()) || strings.Contains(e.String(), "too long")):
			t.Errorf("%v: %v, stderr %q; want it to say the process exited", args, err, e.String())
		}
		t.Logf("%v: %v, %d threads, %s", args, err, n, strings.TrimSpace(e.String()))
	}
}
