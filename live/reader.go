package live

import (
	"time"

	"github.com/rewindstack/rewind/regs"
)

// Reader reads a stopped process's memory during a capture (see
// Options.During).
type Reader struct {
	tid         int
	threads     []StoppedThread
	wantStopped map[int]bool // see Stop
	deadline    time.Time    // see Deadline
}

// Deadline is when During's reads should be done: Options.MaxPause after
// During was called, or the zero time when they are not bounded (outside
// a capture, WithStopped, a negative MaxPause). Readers of runtime data
// (Python stacks, fibers) whose re-read in the pause would run past it
// keep what they read before the pause, and say it was not re-checked,
// rather than hold every thread stopped: the pause is then at most the
// time to stop the threads and MaxPause.
func (r *Reader) Deadline() time.Time { return r.deadline }

// Expired reports whether the pause has run past Deadline.
func (r *Reader) Expired() bool {
	return !r.deadline.IsZero() && time.Now().After(r.deadline)
}

// StoppedThread is a thread stopped for a capture, as Options.During
// sees it.
type StoppedThread struct {
	TID int
	// TP is the thread pointer (fs_base on amd64, 0 where unknown): the
	// thread's libc TCB (glibc's pointer guard is at +0x30, and
	// pthread_self() is TP).
	TP uint64
	// Asleep says the thread is not stopped but left asleep in the kernel
	// (Options.LeaveAsleep): it does not run while During reads (TP is
	// 0 unless Options.BlockedThreads gave it).
	Asleep bool
}

// Threads returns the stopped threads during a capture (the main thread
// first when it is stopped), and those left asleep; nil outside one.
func (r *Reader) Threads() []StoppedThread { return r.threads }

// Stop asks, from Options.During, for thread tid, left asleep
// (StoppedThread.Asleep), to be stopped: what During read says its
// registers are needed (a goroutine found running on it). When During
// returns, the thread is stopped, its registers and stack copied, and
// During called again with it stopped, as for a thread that woke. Other
// threads are ignored.
func (r *Reader) Stop(tid int) {
	if r.wantStopped == nil {
		r.wantStopped = map[int]bool{}
	}
	r.wantStopped[tid] = true
}

// NewReader returns a Reader of process pid's memory outside a capture:
// its reads race with the running process.
func NewReader(pid int) *Reader { return &Reader{tid: pid} }

// Read is one request of a batch: Buf is filled from Addr, and N is set
// to the number of bytes read (short when an unreadable page ends it).
type Read struct {
	Addr uint64
	Buf  []byte
	N    int
}

// Reader returns a Reader of the snapshot's process that knows its
// threads, as Options.During gets one: inside WithStopped's function it
// reads the stopped process; after Capture its reads race with the
// running process.
func (s *Snapshot) Reader() *Reader {
	r := &Reader{tid: s.PID}
	for _, th := range s.Threads {
		if th.Err == nil {
			r.threads = append(r.threads, StoppedThread{TID: th.TID, TP: th.TP})
		}
	}
	return r
}

// AsleepThread is a thread found blocked in the kernel before the
// threads are stopped, as Options.LeaveAsleep sees it.
type AsleepThread struct {
	TID int
	// Syscall is the system call it is blocked in; -1 when it is blocked
	// in the kernel otherwise (a page fault).
	Syscall int
	// SP and PC are its user stack pointer and program counter.
	SP, PC uint64
}

// BlockedThread is a thread blocked in the kernel, as
// Options.BlockedThreads reports it.
type BlockedThread struct {
	TID int
	// Regs are its user registers, saved on its entry to the kernel.
	Regs regs.Regs
	// TP is its thread pointer (fs_base on amd64).
	TP uint64
	// Syscall is the system call it is in (-1: none, a page fault).
	Syscall int
}
