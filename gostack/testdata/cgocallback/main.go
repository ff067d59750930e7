// Command cgocallback is a test fixture of package gostack: it captures
// stacks with gostack.Callers and runtime.Callers in Go code called back
// from C (and in plain Go code of a cgo program) and exits non-zero, with
// the difference on stderr, when they disagree.
package main

/*
extern int goCallback(int);

static int callIntoGo(int depth) {
	// A C frame between two Go frames.
	return goCallback(depth) + 1;
}
*/
import "C"

import (
	"fmt"
	"os"
	"runtime"

	"github.com/rewindstack/rewind/gostack"
)

//export goCallback
func goCallback(depth C.int) C.int {
	if depth > 0 {
		return C.callIntoGo(depth - 1)
	}
	check("callback")
	return 0
}

// check compares the two captures from its caller on.
//
//go:noinline
func check(where string) {
	rt := make([]uintptr, 256)
	fast := make([]uintptr, 256)
	nrt := runtime.Callers(2, rt)
	nfast := gostack.Callers(2, fast)
	rt, fast = rt[:nrt], fast[:nfast]
	same := nrt == nfast
	for i := 0; same && i < nrt; i++ {
		same = rt[i] == fast[i]
	}
	if !same {
		fmt.Fprintf(os.Stderr, "%s: stacks differ\nruntime.Callers:\n%s\ngostack.Callers:\n%s", where, dump(rt), dump(fast))
		os.Exit(1)
	}
	fmt.Printf("%s: %d frames agree\n", where, nrt)
}

func dump(pcs []uintptr) string {
	s := ""
	fr := runtime.CallersFrames(pcs)
	for {
		f, more := fr.Next()
		s += fmt.Sprintf("  %s %s:%d\n", f.Function, f.File, f.Line)
		if !more {
			return s
		}
	}
}

//go:noinline
func viaC(depth int) { C.callIntoGo(C.int(depth)) }

func main() {
	check("main")
	viaC(0)
	viaC(3)
	done := make(chan bool)
	go func() {
		viaC(2)
		check("goroutine after callback")
		done <- true
	}()
	<-done
}
