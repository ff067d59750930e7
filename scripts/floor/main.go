// Command floor does the least a Go program must do for two of rewind's
// jobs, to show what the machine allows beside the peers' times in
// scripts/bench-peers.sh (issue 30's targets):
//
//	floor dump PID      seize every thread of PID, interrupt each, wait
//	                    for its stop, read its registers, detach: a dump
//	                    with no stack read, no unwinding, no symbols and
//	                    no output
//	floor pause PID     the same, printing the pause it imposed: the
//	                    microseconds from the first PTRACE_INTERRUPT to
//	                    the return of the last PTRACE_DETACH (the pause
//	                    rewind's --stats prints), and the thread count;
//	                    at nice -20 where allowed, as rewind's tracer
//	floor read FILE     copy FILE with pread, 1 MiB at a time, on as many
//	                    goroutines as there are CPUs: a report that
//	                    decodes nothing
//
// It prints nothing but floor pause's line. It is built as rewind is (a static Go binary), so its
// start-up is the Go runtime's alone.
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: floor dump PID | floor pause PID | floor read FILE")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "dump":
		_, _, err = dump(os.Args[2])
	case "pause":
		// At the priority rewind's tracer thread takes (where allowed).
		unix.Setpriority(unix.PRIO_PROCESS, 0, -20)
		var pause time.Duration
		var n int
		if pause, n, err = dump(os.Args[2]); err == nil {
			fmt.Printf("%d us %d threads\n", pause.Microseconds(), n)
		}
	case "read":
		err = read(os.Args[2])
	default:
		err = fmt.Errorf("unknown job %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
}

// dump stops and resumes every thread of pid as a capture does, and
// returns how long they were stopped and how many there were.
func dump(pid string) (time.Duration, int, error) {
	runtime.LockOSThread() // ptrace requests come from one thread
	d, err := os.Open("/proc/" + pid + "/task")
	if err != nil {
		return 0, 0, err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return 0, 0, err
	}
	var tids []int
	for _, n := range names {
		if t, err := strconv.Atoi(n); err == nil && unix.PtraceSeize(t) == nil {
			tids = append(tids, t)
		}
	}
	start := time.Now()
	for _, t := range tids {
		unix.PtraceInterrupt(t)
	}
	var regs unix.PtraceRegs
	for _, t := range tids {
		var ws unix.WaitStatus
		if _, err := unix.Wait4(t, &ws, unix.WALL, nil); err == nil {
			unix.PtraceGetRegs(t, &regs)
		}
	}
	for _, t := range tids {
		unix.PtraceDetach(t)
	}
	pause := time.Since(start)
	if len(tids) == 0 {
		return 0, 0, fmt.Errorf("no thread of %s could be seized", pid)
	}
	return pause, len(tids), nil
}

// read copies the file with pread on every CPU.
func read(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	const chunk = 1 << 20
	n := int64(runtime.GOMAXPROCS(0))
	per := (st.Size()/n + chunk - 1) / chunk * chunk
	var wg sync.WaitGroup
	for i := int64(0); i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, chunk)
			for off := i * per; off < min(st.Size(), (i+1)*per); off += chunk {
				f.ReadAt(buf, off)
			}
		}()
	}
	wg.Wait()
	return nil
}
