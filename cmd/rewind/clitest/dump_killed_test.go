package clitest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
)

// killTarget has N threads blocked on a condition variable and a main
// thread that answers each byte it reads on fd 3 with the same byte on
// fd 4: after a dump is killed, the answer shows the process still runs.
const killTarget = `#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
static void *run(void *a) {
	(void)a;
	pthread_mutex_lock(&mu);
	for (;;)
		pthread_cond_wait(&never, &mu);
}
int main(int argc, char **argv) {
	int n = atoi(argv[1]);
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setstacksize(&at, 128 << 10);
	pthread_t t;
	for (int i = 0; i < n; i++)
		if (pthread_create(&t, &at, run, 0)) {
			perror("pthread_create");
			return 1;
		}
	printf("ready\n");
	fflush(stdout);
	char c;
	while (read(3, &c, 1) == 1)
		if (write(4, &c, 1) != 1)
			return 1;
	return 0;
}
`

// TestDumpKilledLeavesNothing (issue 42 item 4) kills `rewind dump PID`
// with SIGKILL at different moments of its run: after random delays, in
// the default (threads read in place) and the --stop modes; while it
// holds the BPF task iterator open (reading the threads); and in
// --stop's pause, once a thread of the target is seen in its ptrace
// stop. After each kill no thread of the target is left stopped (state
// t or T in /proc/PID/task/*/stat), the target still answers on its
// pipe, and every BPF program, map and link that rewind held (read from
// its /proc/PID/fdinfo while it ran) is gone from the kernel.
func TestDumpKilledLeavesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("running as uid %d: the dump's in-place read needs BPF and ptrace (root)", os.Geteuid())
	}
	tg := startKillTarget(t, 2000)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("random delays from seed %d", seed)
	// How long a whole dump takes here, to spread the delays over it.
	start := time.Now()
	if _, stderr, code := run(t, "dump", strconv.Itoa(tg.pid)); code != 0 {
		t.Fatalf("dump exited %d:\n%s", code, stderr)
	}
	whole := time.Since(start)
	t.Logf("a whole dump: %v", whole)
	type kill struct {
		name  string
		args  []string
		when  killWhen
		event bool // a moment the dump may not reach before it ends: tried again
	}
	var kills []kill
	for i := 0; i < 6; i++ {
		d := time.Duration(rng.Int64N(int64(whole)))
		kills = append(kills, kill{"after " + d.String(), nil, afterDelay(d), false})
	}
	for i := 0; i < 3; i++ {
		d := time.Duration(rng.Int64N(int64(whole)))
		kills = append(kills, kill{"--stop after " + d.String(), []string{"--stop"}, afterDelay(d), false})
	}
	kills = append(kills,
		kill{"in the BPF iterator", nil, holdingIterator, true},
		kill{"in the BPF iterator, again", nil, holdingIterator, true},
		kill{"in --stop's pause", []string{"--stop"}, targetStopped(tg.pid, tg.last), true},
		kill{"in --stop's pause, again", []string{"--stop"}, targetStopped(tg.pid, tg.last), true})
	for _, k := range kills {
		var killed bool
		var held map[string][]uint32
		for try := 0; try < 20; try++ {
			killed, held = killDump(t, append(append([]string{"dump"}, k.args...), strconv.Itoa(tg.pid)), k.when)
			checkAfterKill(t, k.name, tg, held)
			if killed || !k.event {
				break
			}
		}
		switch {
		case killed:
			t.Logf("%s: killed; it held BPF objects %v", k.name, held)
		case k.event:
			t.Errorf("%s: the dump never reached that point in 20 tries", k.name)
		default:
			t.Logf("%s: the dump ended before", k.name)
		}
	}
}

// killProc is the target of TestDumpKilledLeavesNothing.
type killProc struct {
	pid, last int // its main thread, and the last of its threads
	in, out   *os.File
}

func startKillTarget(t *testing.T, n int) *killProc {
	exe := fixture.BuildC(t, killTarget)
	reqR, reqW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, strconv.Itoa(n))
	cmd.ExtraFiles = []*os.File{reqR, repW} // fds 3 and 4
	p := fixture.StartCmd(t, cmd)
	reqR.Close()
	repW.Close()
	t.Cleanup(func() { reqW.Close(); repR.Close() })
	return &killProc{pid: p.PID, last: p.TIDs[len(p.TIDs)-1], in: reqW, out: repR}
}

// killWhen waits, while the dump rpid runs, for the moment to kill it,
// and reports whether that moment came (false: the dump ended first,
// and done is closed).
type killWhen func(rpid int, done <-chan struct{}) bool

func afterDelay(d time.Duration) killWhen {
	return func(_ int, done <-chan struct{}) bool {
		select {
		case <-time.After(d):
		case <-done:
		}
		return true
	}
}

// holdingIterator is the moment the dump holds a BPF iterator's file open:
// it is reading the target's threads with it.
func holdingIterator(rpid int, done <-chan struct{}) bool {
	for {
		select {
		case <-done:
			return false
		default:
		}
		for _, kind := range fdKinds(rpid) {
			if kind == "anon_inode:bpf_iter" {
				return true
			}
		}
	}
}

// targetStopped is the moment thread tid of process pid is in a ptrace
// stop.
func targetStopped(pid, tid int) killWhen {
	return func(_ int, done <-chan struct{}) bool {
		for {
			select {
			case <-done:
				return false
			default:
			}
			if s, _ := threadState(pid, tid); s == 't' {
				return true
			}
		}
	}
}

// killDump starts rewind with args, kills it with SIGKILL at the moment
// when gives, and returns whether it was killed (not ended by itself
// first) and the BPF objects (kind: prog, map, link; their ids) rewind
// was seen holding.
func killDump(t *testing.T, args []string, when killWhen) (bool, map[string][]uint32) {
	t.Helper()
	cmd := exec.Command(rewindBin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rpid := cmd.Process.Pid
	done := make(chan struct{})
	held := map[string][]uint32{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		// Which BPF objects rewind holds, until it is gone.
		defer wg.Done()
		seen := map[string]bool{}
		for {
			select {
			case <-done:
				return
			default:
			}
			// Not a busy loop: rewind needs the CPUs. Its program
			// and map live through the dump; a link, only through
			// a read, holds the program, so it goes when that goes.
			time.Sleep(200 * time.Microsecond)
			for kind, ids := range bpfHeld(rpid) {
				for _, id := range ids {
					key := fmt.Sprint(kind, id)
					if !seen[key] {
						seen[key] = true
						mu.Lock()
						held[kind] = append(held[kind], id)
						mu.Unlock()
					}
				}
			}
		}
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait(); close(done) }()
	if when(rpid, done) {
		cmd.Process.Signal(syscall.SIGKILL)
	}
	err := <-waited
	wg.Wait()
	var ee *exec.ExitError
	killed := errors.As(err, &ee) && ee.ExitCode() == -1
	if err != nil && !killed {
		// Ended by itself with an error before the signal.
		t.Errorf("rewind %v: %v\n%s", args, err, stderr.String())
	}
	mu.Lock()
	defer mu.Unlock()
	return killed, held
}

// checkAfterKill checks that the target tg has no thread left stopped,
// still answers, and that the BPF objects held are gone.
func checkAfterKill(t *testing.T, name string, tg *killProc, held map[string][]uint32) {
	t.Helper()
	// The kernel detaches a dead tracer's tracees as it exits; a tracee
	// then resumes when it next gets a CPU, so wait for that.
	deadline := time.Now().Add(20 * time.Second)
	for {
		stopped := stoppedThreads(t, tg.pid)
		if len(stopped) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: threads of the target still stopped: %v", name, stopped)
		}
		time.Sleep(5 * time.Millisecond)
	}
	tg.out.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := tg.in.Write([]byte{'x'}); err != nil {
		t.Fatalf("%s: writing to the target: %v", name, err)
	}
	var b [1]byte
	if _, err := tg.out.Read(b[:]); err != nil || b[0] != 'x' {
		t.Fatalf("%s: the target did not answer: %q, %v", name, b, err)
	}
	// A BPF object is freed when its last reference goes, and its id
	// then; a program's release may be deferred to a work queue.
	for kind, ids := range held {
		for _, id := range ids {
			for !bpfGone(kind, id) {
				if time.Now().After(deadline) {
					t.Fatalf("%s: BPF %s %d that rewind held is still loaded", name, kind, id)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
}

// bpfHeld reads the ids of the BPF programs, maps and links process pid
// holds file descriptors of, from /proc/PID/fdinfo.
func bpfHeld(pid int) map[string][]uint32 {
	out := map[string][]uint32{}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return out
	}
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil || !strings.HasPrefix(l, "anon_inode:bpf") {
			continue
		}
		info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, e.Name()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(info), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			kind, ok := map[string]string{"prog_id": "prog", "map_id": "map", "link_id": "link"}[k]
			if id, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32); ok && err == nil {
				out[kind] = append(out[kind], uint32(id))
			}
		}
	}
	return out
}

// bpfGone reports whether no BPF object of kind has id any more.
func bpfGone(kind string, id uint32) bool {
	var err error
	switch kind {
	case "prog":
		var p *ebpf.Program
		if p, err = ebpf.NewProgramFromID(ebpf.ProgramID(id)); err == nil {
			p.Close()
		}
	case "map":
		var m *ebpf.Map
		if m, err = ebpf.NewMapFromID(ebpf.MapID(id)); err == nil {
			m.Close()
		}
	case "link":
		var l link.Link
		if l, err = link.NewFromID(link.ID(id)); err == nil {
			l.Close()
		}
	}
	return errors.Is(err, os.ErrNotExist)
}

// fdKinds returns what process pid's file descriptors are (readlink).
func fdKinds(pid int) []string {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil {
			out = append(out, l)
		}
	}
	return out
}

// stoppedThreads lists the threads of pid in state t (ptrace stop) or T
// (job control stop).
func stoppedThreads(t *testing.T, pid int) []string {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatalf("the target is gone: %v", err)
	}
	var out []string
	for _, e := range ents {
		tid, _ := strconv.Atoi(e.Name())
		if s, ok := threadState(pid, tid); ok && (s == 't' || s == 'T') {
			out = append(out, fmt.Sprintf("%d %c", tid, s))
		}
	}
	return out
}

// threadState reads the state letter of /proc/PID/task/TID/stat.
func threadState(pid, tid int) (byte, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, false
	}
	return b[i+2], true
}
