// Command labels parks goroutines that carry pprof labels whose keys and
// values need Go's quoting ("]", quotes, non-ASCII, a byte that is no
// UTF-8, characters above U+FFFF) beside unlabelled ones, after two
// collections (so the runtime's own goroutines exist and are parked). It
// prints "ready" once they are parked; each line on stdin asks for the
// program's own traceback (runtime.Stack of every goroutine), followed by
// a line "END":
//
//	plain   the default GOTRACEBACK level, GODEBUG=tracebacklabels=0
//	labels  the default level, GODEBUG=tracebacklabels=1
//	system  GOTRACEBACK=system (debug.SetTraceback), tracebacklabels=0
//
// and "id" prints the id of the goroutine that writes those tracebacks.
package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"sync"
	"time"
)

var (
	never  = make(chan int)
	mu     sync.Mutex
	parked sync.WaitGroup
)

//go:noinline
func recv() { parked.Done(); <-never }

//go:noinline
func selecting() {
	parked.Done()
	a, b := make(chan int), make(chan int)
	select {
	case <-a:
	case <-b:
	}
}

//go:noinline
func locking() { parked.Done(); mu.Lock() }

//go:noinline
func sleeping() { parked.Done(); time.Sleep(time.Hour) }

// labelled parks f under the label pairs kv.
func labelled(f func(), kv ...string) {
	parked.Add(1)
	go pprof.Do(context.Background(), pprof.Labels(kv...), func(context.Context) { f() })
}

func main() {
	mu.Lock()
	labelled(recv, "req", "r0", "zone", "eu-west")
	labelled(recv, "req", "r1", "zone", "eu-west")
	labelled(selecting, "path", "/a]b", "op", "get")
	labelled(locking, "name", "café", "emoji", "\U0001F600")
	labelled(sleeping, "q\"uote", "back\\slash\ttab\nnl", "ctl", "\x01\x7f")
	labelled(recv, "bad", "\xff\xfe", "empty", "")
	labelled(recv, "plain.key/x_y", "Value.0/9_Z")
	for i := 0; i < 4; i++ {
		parked.Add(1)
		go recv()
	}
	parked.Add(1)
	go selecting()
	parked.Wait()
	// The collector's workers start with the first cycle; the second
	// leaves them, the sweeper and the scavenger parked.
	runtime.GC()
	runtime.GC()
	time.Sleep(50 * time.Millisecond)
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	buf := make([]byte, 1<<20)
	for in.Scan() {
		switch cmd := in.Text(); cmd {
		case "plain", "labels", "system":
			godebug := "tracebacklabels=0"
			if cmd == "labels" {
				godebug = "tracebacklabels=1"
			}
			os.Setenv("GODEBUG", godebug)
			if cmd == "system" {
				debug.SetTraceback("system")
			}
			n := runtime.Stack(buf, true)
			debug.SetTraceback("single")
			os.Stdout.Write(buf[:n])
			fmt.Println("\nEND")
		case "id":
			n := runtime.Stack(buf, false)
			id, _, _ := strings.Cut(strings.TrimPrefix(string(buf[:n]), "goroutine "), " ")
			fmt.Println(id)
		}
	}
}
