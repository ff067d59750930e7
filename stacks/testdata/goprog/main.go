// Command goprog is a Go target for rewind's live tests: three goroutines
// locked to their threads block in system calls under known frames
// (main.levelA -> main.readPipe, main.sleepLong), so every thread is asleep
// and its stack is predictable. It prints "ready" once they are in place.
package main

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"time"
)

//go:noinline
func readPipe(fd int) {
	var b [1]byte
	syscall.Read(fd, b[:]) // nothing is ever written
}

//go:noinline
func levelA(fd int) { readPipe(fd) }

//go:noinline
func sleepLong() {
	ts := syscall.Timespec{Sec: 100000}
	syscall.Nanosleep(&ts, nil)
}

func pipeFD() int {
	r, _, err := os.Pipe()
	if err != nil {
		panic(err)
	}
	return int(r.Fd()) // Fd makes the descriptor blocking
}

func main() {
	a, b := pipeFD(), pipeFD()
	go func() {
		runtime.LockOSThread()
		levelA(a)
	}()
	go func() {
		runtime.LockOSThread()
		sleepLong()
	}()
	go func() {
		// Once the goroutines above are in their system calls, say so.
		time.Sleep(200 * time.Millisecond)
		fmt.Println("ready")
	}()
	runtime.LockOSThread()
	levelA(b)
}
