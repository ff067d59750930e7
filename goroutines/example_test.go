package goroutines_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/goroutines"
	"github.com/rewindstack/rewind/goroutines/traceback"
	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// TestMain lets the test binary serve as the Example's target: with
// REWIND_GOROUTINES_CHILD=1 it parks three goroutines and waits for its
// standard input to close.
func TestMain(m *testing.M) {
	if os.Getenv("REWIND_GOROUTINES_CHILD") == "1" {
		childMain()
		return
	}
	os.Exit(fixture.Main(m))
}

var parkHere = make(chan int)

//go:noinline
func parkForExample() { <-parkHere }

func childMain() {
	for i := 0; i < 3; i++ {
		go parkForExample()
	}
	for n := 0; n < 3; runtime.Gosched() {
		n = 0
		for _, l := range strings.Split(string(stackDump()), "\n\n") {
			if strings.Contains(l, "[chan receive") && strings.Contains(l, "parkForExample") {
				n++
			}
		}
	}
	fmt.Println("ready")
	bufio.NewReader(os.Stdin).ReadString('\n')
}

// example starts the test binary as a child that parks goroutines.
func example() (pid int, stop func()) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "REWIND_GOROUTINES_CHILD=1")
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	bufio.NewReader(out).ReadString('\n')
	return cmd.Process.Pid, func() { in.Close(); cmd.Wait() }
}

// Example dumps the goroutines of another Go process: its threads and
// goroutines are copied in one pause, then each goroutine is a target
// context to unwind, and the report (package traceback) lists what Go's
// traceback would.
func Example() {
	pid, stop := example()
	defer stop()

	snap, set, err := goroutines.Capture(pid, live.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	tg := snap.Target(nil, nil)
	kinds := map[target.Kind]int{}
	for _, c := range set.Contexts(tg) {
		kinds[c.Kind]++
	}
	fmt.Println(kinds[target.KindGoroutine] == len(set.Goroutines))

	u, _ := unwind.ByName("auto")
	rep := traceback.New(set, tg, u, &symbolize.Symbolizer{Inlines: true})
	for _, g := range rep.Goroutines {
		if len(g.Frames) > 0 && strings.HasSuffix(g.Frames[0].Function, ".parkForExample") {
			fmt.Printf("[%s] %s, created by %s\n", g.WaitReason, g.Frames[0].Function, g.CreatedBy.Function)
		}
	}
	// Output:
	// true
	// [chan receive] github.com/rewindstack/rewind/goroutines_test.parkForExample, created by github.com/rewindstack/rewind/goroutines_test.childMain
	// [chan receive] github.com/rewindstack/rewind/goroutines_test.parkForExample, created by github.com/rewindstack/rewind/goroutines_test.childMain
	// [chan receive] github.com/rewindstack/rewind/goroutines_test.parkForExample, created by github.com/rewindstack/rewind/goroutines_test.childMain
}

// stackDump is the process's own goroutine dump.
func stackDump() []byte {
	buf := make([]byte, 1<<20)
	return buf[:runtime.Stack(buf, true)]
}
