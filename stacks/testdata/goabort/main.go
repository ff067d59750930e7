// Command goabort is a Go target for rewind's core tests of Go programs
// on other architectures (run under qemu-user): two goroutines locked to
// their threads block reading pipes under known frames (main.levelA ->
// main.readPipe), and once both are in their system calls it prints
// "ready". A line on its standard input then makes it write the
// runtime's own dump of every goroutine to stacks.txt and die of SIGABRT
// at once, with a core: the signal's action is made the default one
// behind the runtime's back, so that no Go signal handler runs and every
// other thread stays where it was.
package main

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"unsafe"
)

//go:noinline
func readPipe(fd int) {
	var b [1]byte
	syscall.Read(fd, b[:]) // nothing is ever written
}

//go:noinline
func levelA(fd int) { readPipe(fd) }

func pipeFD() int {
	r, _, err := os.Pipe()
	if err != nil {
		panic(err)
	}
	return int(r.Fd()) // Fd makes the descriptor blocking
}

// die sends SIGABRT to this thread with its default action.
//
//go:noinline
func die(pid, tid int) {
	var act [4]uint64 // the kernel's struct sigaction, all zero: SIG_DFL
	syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(syscall.SIGABRT), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
	syscall.RawSyscall(syscall.SYS_TGKILL, uintptr(pid), uintptr(tid), uintptr(syscall.SIGABRT))
}

func main() {
	runtime.LockOSThread()
	a, b := pipeFD(), pipeFD()
	for _, fd := range []int{a, b} {
		go func() {
			runtime.LockOSThread()
			levelA(fd)
		}()
	}
	// Wait until the runtime says both goroutines are in their system
	// calls.
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if bytes.Count(buf[:n], []byte("[syscall, locked to thread]")) == 2 &&
			bytes.Count(buf[:n], []byte("main.readPipe(")) == 2 {
			break
		}
		runtime.Gosched()
	}
	fmt.Println("ready")
	var cmd [1]byte
	os.Stdin.Read(cmd[:])
	n := runtime.Stack(buf, true)
	if err := os.WriteFile("stacks.txt", buf[:n], 0o644); err != nil {
		panic(err)
	}
	die(syscall.Getpid(), syscall.Gettid())
}
