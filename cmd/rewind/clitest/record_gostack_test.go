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
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
)

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
	dir := t.TempDir()
	exe := fixture.BuildGo(t, fixture.GoGrowSource)
	prog := exec.Command(exe, "60")
	prog.Stdout = io.Discard
	if err := prog.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { prog.Process.Kill(); prog.Wait() }()
	pid := strconv.Itoa(prog.Process.Pid)
	stderrs := recordBothModes(t, pid, func(mode string) string { return filepath.Join(dir, mode+".folded") }, "-d", "6", "--stats")
	if t.Failed() {
		return
	}
	ends := map[string]goEnds{}
	for _, mode := range []string{"kernel", "user"} {
		e := readGoEnds(t, filepath.Join(dir, mode+".folded"))
		ends[mode] = e
		t.Logf("--unwind-in %s: %s", mode, e)
		if e.total < 1000 {
			t.Fatalf("--unwind-in %s: %d samples, want 1000 at least\n%s", mode, e.total, stderrs[mode])
		}
		if e.roots*1000 < e.total*995 {
			t.Errorf("--unwind-in %s: %.2f%% of the samples end at a Go root, want >= 99.5%%\n%s", mode, e.pct(e.roots), stderrs[mode])
		}
		if e.crossed*10 < e.total {
			t.Errorf("--unwind-in %s: %.2f%% of the samples crossed runtime.morestack to their goroutine, want >= 10%% (the program grows stacks all the time)", mode, e.pct(e.crossed))
		}
	}
	if !strings.Contains(stderrs["kernel"], "root+go-stack-switch") {
		t.Errorf("--unwind-in kernel: the fidelity table counts no walk that crossed a Go stack switch:\n%s", stderrs["kernel"])
	}
	if !regexp.MustCompile(`(?m)^rewind: Go assist: 1 Go processes; [1-9]\d* samples on a system stack copied their goroutine, [1-9]\d* of them paired`).MatchString(stderrs["user"]) {
		t.Errorf("--unwind-in user --stats: no line saying what the Go assist did:\n%s", stderrs["user"])
	}
}
