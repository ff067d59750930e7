// gostack prints a stack of its own, with inlined calls, as the Go runtime
// sees it: one line per PC that runtime.Callers returns (a return address
// for each physical frame, and a "virtual" PC for each inlined call),
// with runtime.CallersFrames' function, file and line for it. The first
// line is the address its executable's first page is mapped at.
package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
)

//go:noinline
func leaf(n int) []uintptr {
	pcs := make([]uintptr, 64+n%2)
	k := runtime.Callers(1, pcs)
	return pcs[:k]
}

func inner(n int) []uintptr { return leaf(n + 1) }

func outer(n int) []uintptr {
	if n < 0 {
		return nil
	}
	return inner(n * 2)
}

type box[T any] struct{ v T }

func (b box[T]) through(n int) []uintptr { return outer(n) }

//go:noinline
func mid(n int) []uintptr { return box[string]{"x"}.through(n) }

type T struct{ k int }

//go:noinline
func (t *T) method() []uintptr { return mid(t.k) }

// printBase prints where the executable's file offset 0 is mapped, from
// /proc/self/maps.
func printBase() {
	exe, _ := os.Executable()
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 6 && fs[2] == "00000000" && fs[5] == exe {
			fmt.Printf("base\t0x%s\n", strings.Split(fs[0], "-")[0])
			return
		}
	}
	fmt.Fprintln(os.Stderr, "executable not in /proc/self/maps")
	os.Exit(1)
}

func main() {
	printBase()
	pcs := (&T{3}).method()
	frames := runtime.CallersFrames(pcs)
	n := 0
	for {
		f, more := frames.Next()
		if n >= len(pcs) {
			fmt.Fprintln(os.Stderr, "more frames than PCs")
			os.Exit(1)
		}
		fmt.Printf("%#x\t%s\t%s\t%d\n", pcs[n], f.Function, f.File, f.Line)
		n++
		if !more {
			break
		}
	}
	if n != len(pcs) {
		fmt.Fprintf(os.Stderr, "%d frames for %d PCs\n", n, len(pcs))
		os.Exit(1)
	}
}
