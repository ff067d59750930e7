// Command cgo has one goroutine blocked in C (sleep, through cgo) and one
// in a plain system call (read on a pipe); it prints "ready", then answers
// "dump" on stdin with its own goroutine dump (pprof debug=2) and "END".
// "cgo vfork" also has a goroutine whose thread vforks a child that
// sleeps half a second, again and again: a thread slow to stop.
package main

/*
#include <sys/wait.h>
#include <unistd.h>

static void csleep(void) {
	for (;;) sleep(3600);
}

// vforkwait blocks its thread in vfork for half a second: until the
// child exits, the thread cannot be stopped (not even by ptrace).
static void vforkwait(void) {
	pid_t p = vfork();
	if (p == 0) {
		usleep(500000);
		_exit(0);
	}
	if (p > 0) waitpid(p, 0, 0);
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
	if len(os.Args) > 1 && os.Args[1] == "vfork" {
		go func() {
			for {
				C.vforkwait()
			}
		}()
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
