// Command cgo has one goroutine blocked in C (sleep, through cgo) and one
// in a plain system call (read on a pipe); it prints "ready", then answers
// "dump" on stdin with its own goroutine dump (pprof debug=2) and "END".
package main

/*
#include <unistd.h>

static void csleep(void) {
	for (;;) sleep(3600);
}
*/
import "C"

import (
	"bufio"
	"fmt"
	"os"
	"runtime/pprof"
	"syscall"
	"time"
)

//go:noinline
func cSleep() { C.csleep() }

//go:noinline
func rawRead(fd int) {
	var b [1]byte
	syscall.Read(fd, b[:])
}

func main() {
	var p [2]int
	if err := syscall.Pipe(p[:]); err != nil {
		panic(err)
	}
	go cSleep()
	go rawRead(p[0])
	time.Sleep(200 * time.Millisecond)
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() == "dump" {
			pprof.Lookup("goroutine").WriteTo(os.Stdout, 2)
			fmt.Println("END")
		}
	}
}
