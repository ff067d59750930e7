// Command parked parks hundreds of goroutines in different ways (channels,
// select, mutexes, sync.Cond, sleep, network reads, WaitGroup, labels) at
// varied depths, with inlined calls. It prints "ready" once they are
// parked; each line "dump" on stdin prints the program's own goroutine
// dump (pprof debug=2) followed by a line "END"; "time" prints how long
// that dump takes (nanoseconds, written to io.Discard).
//
// "parked churn" also keeps creating and ending goroutines; "parked bench
// N" parks only N goroutines on channel receives.
package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

var (
	never     = make(chan int)
	neverSend = make(chan int)
	mu        sync.Mutex
	rw        sync.RWMutex
	cond      = sync.NewCond(&sync.Mutex{})
	wg        sync.WaitGroup
	parked    sync.WaitGroup
)

// inlined helpers: small enough for the compiler to inline.
func recvInline() int  { return <-never }
func sendInline(v int) { neverSend <- v }

//go:noinline
func deep(n int, f func()) {
	if n == 0 {
		f()
		return
	}
	deep(n-1, f)
}

//go:noinline
func chanRecv() { parked.Done(); recvInline() }

//go:noinline
func chanSend() { parked.Done(); sendInline(1) }

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
func rlocking() { parked.Done(); rw.RLock() }

//go:noinline
func condWait() {
	cond.L.Lock()
	parked.Done()
	cond.Wait()
}

//go:noinline
func sleeping() { parked.Done(); time.Sleep(time.Hour) }

//go:noinline
func waiting() { parked.Done(); wg.Wait() }

//go:noinline
func reading(c net.Conn) {
	parked.Done()
	var b [1]byte
	c.Read(b[:])
}

func spawn(n int, depth int, f func()) {
	for i := 0; i < n; i++ {
		parked.Add(1)
		d := i % depth
		go deep(d, f)
	}
}

// pingpong passes a counter back and forth with its partner for ever:
// it parks again and again at the same place, with the same stack depth.
//
//go:noinline
func pingpong(in <-chan int, out chan<- int) {
	for {
		n := <-in
		churned.Store(int64(n))
		out <- n + 1
	}
}

// churned counts goroutines that churn started and ended.
var churned atomic.Int64

func churn() {
	for {
		var done sync.WaitGroup
		for i := 0; i < 32; i++ {
			done.Add(1)
			go func() {
				defer done.Done()
				deep(i%4, func() { churned.Add(1) })
			}()
		}
		done.Wait()
	}
}

func main() {
	if len(os.Args) > 2 && os.Args[1] == "bench" {
		n, _ := strconv.Atoi(os.Args[2])
		spawn(n, 4, chanRecv)
		parked.Wait()
		serve()
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "churn" {
		go churn()
	}
	if len(os.Args) > 1 && os.Args[1] == "pingpong" {
		a, b := make(chan int), make(chan int)
		go pingpong(a, b)
		go pingpong(b, a)
		a <- 0
	}
	mu.Lock()
	rw.Lock()
	wg.Add(1)
	spawn(60, 6, chanRecv)
	spawn(30, 3, chanSend)
	spawn(40, 4, selecting)
	spawn(30, 5, locking)
	spawn(20, 2, rlocking)
	spawn(30, 3, condWait)
	spawn(30, 4, sleeping)
	spawn(20, 2, waiting)
	// Labelled goroutines.
	for i := 0; i < 10; i++ {
		parked.Add(1)
		go pprof.Do(context.Background(), pprof.Labels("worker", fmt.Sprint(i%3), "kind", "labelled"), func(context.Context) {
			chanRecv()
		})
	}
	// Network reads on loopback.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c // held open, never written
			defer c.Close()
		}
	}()
	for i := 0; i < 20; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			panic(err)
		}
		parked.Add(1)
		go deep(i%3, func() { reading(c) })
	}
	// One goroutine locked to its thread.
	parked.Add(1)
	go func() {
		runtime.LockOSThread()
		chanRecv()
	}()
	parked.Wait()
	time.Sleep(100 * time.Millisecond)
	serve()
}

func serve() {
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "dump":
			pprof.Lookup("goroutine").WriteTo(os.Stdout, 2)
			fmt.Println("END")
		case "time":
			start := time.Now()
			pprof.Lookup("goroutine").WriteTo(io.Discard, 2)
			fmt.Println(time.Since(start).Nanoseconds())
		case "churned":
			fmt.Println(churned.Load()) // or pingpong's exchanges
		case "gc":
			// A collection marks the parked goroutines' waitsince
			// with the end of the cycle before it (0 before the
			// first): two make it nonzero.
			runtime.GC()
			runtime.GC()
			fmt.Println("ok")
		}
	}
}
