package clitest

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// growSource is a CPU-bound, garbage-collecting Go program whose
// goroutines grow their stacks all the time: each round starts new
// goroutines (on small stacks) that recurse with 1 KiB frames, so that
// runtime.morestack moves them to g0 again and again (runtime.newstack,
// copystack), and allocate for the collector (runtime.systemstack).
const growSource = `package main

import (
	"os"
	"strconv"
	"sync"
	"time"
)

var sink []*[64]int

//go:noinline
func deep(n int) int {
	var pad [128]int
	for i := range pad {
		pad[i] = n + i
	}
	if n == 0 {
		s := 0
		for i := 0; i < 2000; i++ {
			s += i * i % 7
		}
		return s + pad[5]
	}
	return deep(n-1) + pad[n%128]
}

func main() {
	secs, _ := strconv.ParseFloat(os.Args[1], 64)
	end := time.Now().Add(time.Duration(secs * float64(time.Second)))
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				var inner sync.WaitGroup
				for k := 0; k < 4; k++ {
					inner.Add(1)
					go func() {
						defer inner.Done()
						deep(40)
						for j := 0; j < 20; j++ {
							sink = append(sink[:len(sink)%1024], new([64]int))
						}
					}()
				}
				inner.Wait()
			}
		}()
	}
	wg.Wait()
}
`

// goRoots are where the stacks of a Go program's threads end: a
// goroutine's top (runtime.goexit), a thread's start (runtime.mstart; the
// main thread's runtime.rt0_go) and the scheduler's stack (g0) entered by
// runtime.mcall, where Go's own traceback ends it.
var goRoots = map[string]bool{"runtime.goexit": true, "runtime.mstart": true, "runtime.rt0_go": true, "runtime.mcall": true}

// goEnds sorts the samples of a folded profile by how their user stacks
// end: at a Go root (goRoots); at runtime.morestack on g0 after the
// scheduler descheduled the goroutine that grew its stack
// (runtime.newstack -> gopreempt_m or preemptPark: m.curg is no longer it;
// Go's own traceback ends there); at runtime.morestack otherwise (the
// goroutine's frames missing); elsewhere. It also counts the samples
// whose stack crossed morestack to the goroutine's frames.
type goEnds struct {
	total, roots, descheduled, morestack, crossed int
	other                                         map[string]int
}

func readGoEnds(t *testing.T, folded string) goEnds {
	t.Helper()
	b, err := os.ReadFile(folded)
	if err != nil {
		t.Fatal(err)
	}
	e := goEnds{other: map[string]int{}}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		sp := strings.LastIndexByte(l, ' ')
		if sp < 0 {
			continue
		}
		n, _ := strconv.Atoi(l[sp+1:])
		var user []string // root first
		for i, f := range strings.Split(l[:sp], ";") {
			if i > 0 && !strings.HasSuffix(f, "_[k]") {
				user = append(user, strings.TrimSuffix(f, ".abi0"))
			}
		}
		if len(user) == 0 {
			continue // taken in the kernel, no user stack
		}
		e.total += n
		switch {
		case goRoots[user[0]]:
			e.roots += n
			for i := 1; i+1 < len(user); i++ {
				if user[i] == "runtime.morestack" && user[i+1] == "runtime.newstack" {
					e.crossed += n
					break
				}
			}
		case user[0] == "runtime.morestack" && len(user) > 2 && user[1] == "runtime.newstack" &&
			(user[2] == "runtime.gopreempt_m" || user[2] == "runtime.preemptPark"):
			e.descheduled += n
		case user[0] == "runtime.morestack":
			e.morestack += n
		default:
			e.other[strings.Join(user[:min(len(user), 4)], ";")] += n
		}
	}
	return e
}

func (e goEnds) pct(n int) float64 { return 100 * float64(n) / float64(max(e.total, 1)) }

func (e goEnds) String() string {
	s := fmt.Sprintf("%d samples: %.2f%% at a Go root (%.2f%% crossed morestack to the goroutine), %.2f%% at morestack descheduled, %.2f%% at morestack otherwise, %.2f%% elsewhere",
		e.total, e.pct(e.roots), e.pct(e.crossed), e.pct(e.descheduled), e.pct(e.morestack), e.pct(e.total-e.roots-e.descheduled-e.morestack))
	var keys []string
	for k := range e.other {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return e.other[keys[i]] > e.other[keys[j]] })
	for i, k := range keys {
		if i == 5 {
			break
		}
		s += fmt.Sprintf("\n  %d %s", e.other[k], k)
	}
	return s
}

// TestRecordGoStackSwitches records a CPU-bound, garbage-collecting Go
// program whose goroutines grow their stacks all the time, with
// --unwind-in kernel and --unwind-in user at once (issue 37 item 4).
//
// The kernel walk crosses from g0 to the goroutine as Go's own profiler
// does (runtime.morestack at curg.sched, runtime.systemstack at the
// switch's SP; the g from the thread's TLS), and from morestack whose
// goroutine the scheduler descheduled to g0's own frames (mstart0 at the
// label g0.sched): at least 99.5% of the samples end at runtime.goexit,
// runtime.mstart, runtime.rt0_go or runtime.mcall, at least 10% of them
// having crossed morestack, and the fidelity table counts the walks that
// crossed (root+go-stack-switch).
//
// A sample's stack copy holds g0's stack only, neither the goroutine's g
// nor its stack: the Go assist (internal/goassist) copies them at each
// sample on g0, and the walk in user space crosses as the kernel's does:
// the same 99.5% and 10%, and --stats says what the assist did.
func TestRecordGoStackSwitches(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("BPF and perf events need root")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("no go command: %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(growSource), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module grow\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "grow")
	build := exec.Command("go", "build", "-o", exe, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	prog := exec.Command(exe, "60")
	prog.Stdout = io.Discard
	if err := prog.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { prog.Process.Kill(); prog.Wait() }()
	pid := strconv.Itoa(prog.Process.Pid)
	stderrs := map[string]string{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, mode := range []string{"kernel", "user"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(rewindBin, "record", "--unwind-in", mode, "-F", "999", "-d", "6", "--stats", "-o", filepath.Join(dir, mode+".folded"), "-p", pid)
			var e strings.Builder
			cmd.Stderr = &e
			err := cmd.Run()
			mu.Lock()
			stderrs[mode] = e.String()
			mu.Unlock()
			if err != nil {
				t.Errorf("record --unwind-in %s: %v\n%s", mode, err, e.String())
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	k := readGoEnds(t, filepath.Join(dir, "kernel.folded"))
	t.Logf("--unwind-in kernel: %s", k)
	if k.total < 1000 {
		t.Fatalf("--unwind-in kernel: %d samples, want 1000 at least\n%s", k.total, stderrs["kernel"])
	}
	if k.roots*1000 < k.total*995 {
		t.Errorf("--unwind-in kernel: %.2f%% of the samples end at a Go root, want >= 99.5%%\n%s", k.pct(k.roots), stderrs["kernel"])
	}
	if k.crossed*10 < k.total {
		t.Errorf("--unwind-in kernel: %.2f%% of the samples crossed runtime.morestack to their goroutine, want >= 10%% (the program grows stacks all the time)", k.pct(k.crossed))
	}
	if !strings.Contains(stderrs["kernel"], "root+go-stack-switch") {
		t.Errorf("--unwind-in kernel: the fidelity table counts no walk that crossed a Go stack switch:\n%s", stderrs["kernel"])
	}
	u := readGoEnds(t, filepath.Join(dir, "user.folded"))
	t.Logf("--unwind-in user: %s", u)
	if u.total < 1000 {
		t.Fatalf("--unwind-in user: %d samples, want 1000 at least\n%s", u.total, stderrs["user"])
	}
	if u.roots*1000 < u.total*995 {
		t.Errorf("--unwind-in user: %.2f%% of the samples end at a Go root, want >= 99.5%%\n%s", u.pct(u.roots), stderrs["user"])
	}
	if u.crossed*10 < u.total {
		t.Errorf("--unwind-in user: %.2f%% of the samples crossed runtime.morestack to their goroutine, want >= 10%%", u.pct(u.crossed))
	}
	if !regexp.MustCompile(`(?m)^rewind: Go assist: 1 Go processes; [1-9]\d* samples on a system stack copied their goroutine, [1-9]\d* of them paired`).MatchString(stderrs["user"]) {
		t.Errorf("--unwind-in user --stats: no line saying what the Go assist did:\n%s", stderrs["user"])
	}
}
