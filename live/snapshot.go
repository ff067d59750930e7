package live

import (
	"errors"
	"fmt"
	"time"

	"github.com/rewindstack/rewind/internal/procmaps"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/target"
)

// DefaultMaxStack is the number of stack bytes Capture copies per thread
// when Options.MaxStack is zero.
const DefaultMaxStack = 512 << 10

// redZone is the number of bytes below SP that leaf functions may use
// without moving SP (System V amd64 psABI); they are copied too.
const redZone = 128

// StopTimeout bounds how long a capture waits for a thread to stop after
// PTRACE_INTERRUPT. Threads normally stop within microseconds; one in
// uninterruptible sleep (D state: disk or NFS I/O, a vfork parent) stops
// only when that ends. When the time is up the thread is reported with Err
// and the capture goes on without it; the tracer detaches it once it
// stops, shortly after (or the kernel does, if this process ends first).
// Set it before capturing, not during a capture.
var StopTimeout = time.Second

// Options tune a capture.
type Options struct {
	// MaxStack is the number of bytes of stack copied per thread, from
	// SP-128 (the red zone) upward, bounded by the end of the mapping that
	// holds SP. Zero means DefaultMaxStack; a negative value copies no
	// stack (registers and maps only).
	MaxStack int
	// Threads, when not empty, selects the threads to capture by TID. Only
	// these threads are stopped; the others keep running (see the package
	// documentation). A TID that is not a thread of the process is
	// reported as a Thread with Err set.
	Threads []int
	// MaxStopped bounds how long WithStopped keeps the threads stopped
	// while its function runs: when it expires the threads are resumed
	// and WithStopped returns ErrStoppedTooLong, whatever the function is
	// blocked on (a file that never answers, a slow disk). Zero means
	// DefaultMaxStopped; negative means no limit.
	MaxStopped time.Duration
	// During, when set, is called once while every thread is stopped,
	// to copy more of the process's memory in the same pause (a Go
	// program's goroutines, for example) through r's batched reads. It
	// runs on a thread of its own while the tracer reads the maps and
	// copies the stacks (on the tracer's, after them, when that thread
	// had not begun it by then), and must not keep r.
	During func(r *Reader)
	// BeforeStop, when set, is called on the tracer thread just before
	// the threads are stopped, with a Reader of the running process: to
	// read, there and then, what During will read again in the pause, so
	// that its buffers, the caches of the CPU it runs on and the page
	// tables are warm (a first process_vm_readv into a buffer faulted in
	// before took 5-10 times as long as the next). Capture only.
	BeforeStop func(r *Reader)
	// LeaveAsleep, when set, lets a capture leave unstopped each thread
	// that is blocked in the kernel when the capture begins (in a system
	// call, or a page fault) and for which LeaveAsleep returns true: a
	// thread that does not run cannot change the process's memory, so
	// During reads what it would with the thread stopped, and the thread
	// is not woken to stop (on a busy machine each woken thread waits for
	// a CPU, most of a pause). That it stayed asleep is checked when
	// During returns (the kernel's count of its runs, in
	// /proc/PID/task/TID/schedstat): a thread that ran meanwhile is
	// stopped then, and During called again with it stopped, until During
	// returns with no thread left asleep having run. The threads left
	// asleep are in Snapshot.Threads with Asleep set, Regs holding only
	// the PC and SP of their system call, and no stack; Pause counts only
	// the threads stopped (zero when none was). For callers that need no
	// registers of sleeping threads (a goroutine dump needs those of the
	// threads running goroutines). Capture only, without Threads; on a
	// kernel without schedstat every thread is stopped.
	LeaveAsleep func(t AsleepThread) bool
	// BlockedThreads, when set, reads the registers of the process's
	// threads that are blocked in the kernel without stopping them (a BPF
	// task iterator: internal/taskiter). Every thread it reports is left
	// asleep as with LeaveAsleep (which, when also set, still chooses),
	// with its whole register set and thread pointer, and its stack is
	// copied while it stays blocked; one that ran before the copies and
	// During ended is stopped then and copied again. The others are
	// stopped as usual. Capture only, without Threads.
	BlockedThreads func(pid int) ([]BlockedThread, error)
	// DuringOnTracer runs During on the tracer thread, after its own
	// copies, instead of on the helper thread beside them: for a capture
	// whose copies are few (few threads, maps read before the pause),
	// where waking the helper buys nothing and costs a hand-over (see
	// helper).
	DuringOnTracer bool
	// StaggerDuring lets MaxPause apply to a Capture with During: when
	// threads are slow to stop, During is called with the threads
	// stopped so far (Reader.Threads lists them) just before they are
	// copied and resumed, while the late ones may still run; each late
	// one is then copied as it stops. Without it, a Capture with During
	// waits for every thread.
	StaggerDuring bool
	// MapsHint is how many bytes /proc/PID/maps is expected to hold, when
	// the caller knows the process has many mappings (a fiber runtime
	// with thousands of stacks): the buffer it is read into in the pause
	// is allocated and faulted in before, instead of grown in the pause.
	MapsHint int
	// MapsBeforePause reads /proc/PID/maps just before the threads are
	// stopped instead of while they are: listing tens of thousands of
	// mappings (a fiber runtime's stacks) takes milliseconds of kernel
	// time, all of it pause otherwise. A mapping created or removed
	// between that read and the pause is missed (a thread's stack copy
	// then stops at the old bounds), except that the maps are read again
	// in the pause when a stopped thread's SP is in none of them (a
	// thread created since, on a new stack). Capture only.
	MapsBeforePause bool
	// StackEnd, when set, says where the stack that holds sp ends, for a
	// stack the caller knows of that lies inside a larger mapping (a
	// goroutine's stack in the Go heap, which runs on for megabytes): a
	// thread whose SP it knows (ok) has its stack copied up to that end
	// at most, not MaxStack bytes of whatever follows. It is called in
	// the pause, on the tracer thread, once per stopped thread: it should
	// only look up what it prepared.
	StackEnd func(sp uint64) (end uint64, ok bool)
	// MaxPause bounds, for Capture without During (or with
	// StaggerDuring), how long threads stay
	// stopped waiting for slower ones: a thread that is running or
	// waiting for a CPU on a busy machine stops only when it is
	// scheduled. When some threads have not stopped MaxPause after the
	// first PTRACE_INTERRUPT, the threads stopped so far are copied and
	// resumed at once, and each late one is copied and resumed as soon
	// as it stops (Snapshot.Staggered): every thread is stopped for about
	// MaxPause at most, and the snapshot is no longer of one instant.
	// Threads created after the first are resumed are not captured. Zero
	// means DefaultMaxPause; negative waits for every thread (one
	// instant, however long it takes).
	MaxPause time.Duration
	// BusyWait bounds how long Capture and WithStopped wait when another
	// rewind process is capturing the same process: a thread has one
	// tracer at a time, so the capture lets go of whatever it holds,
	// waits until the other lets go of the threads, and starts again.
	// When the time is up the error wraps ErrBusy (and ErrTraced). Zero
	// means DefaultBusyWait; negative fails at once.
	BusyWait time.Duration
}

// DefaultBusyWait is the default Options.BusyWait: another capture
// normally holds the threads for milliseconds, and one that unwinds while
// they are stopped (WithStopped) for DefaultMaxStopped at most.
const DefaultBusyWait = DefaultMaxStopped + 500*time.Millisecond

// DefaultMaxPause is the default Options.MaxPause.
const DefaultMaxPause = 10 * time.Millisecond

// DefaultMaxStopped is the default Options.MaxStopped.
const DefaultMaxStopped = 2 * time.Second

// ErrStoppedTooLong is returned by WithStopped when its function did not
// finish within Options.MaxStopped; the threads were resumed.
var ErrStoppedTooLong = errors.New("live: the threads were resumed: unwinding them while stopped took too long")

// Thread is one captured thread.
type Thread struct {
	TID  int
	Name string // /proc/PID/task/TID/comm, read after the threads resumed
	// Regs are the registers at the stop, in DWARF numbering (PC in the
	// return address column).
	Regs regs.Regs
	// TP is the thread pointer (fs_base on amd64; 0 where the register
	// set does not hold it): libc's TCB, where its pointer guard is.
	TP uint64
	// Stack is the copy of the thread's stack; Addr is the first copied
	// byte (SP-128 unless that lies below the stack's mapping). Empty for
	// WithStopped, and when SP is in no readable mapping.
	Stack target.Region
	// Err is set when the thread could not be captured: it exited before
	// it stopped, it did not stop in time, or it is not a thread of the
	// process (Options.Threads). Regs and Stack are then empty. (A thread
	// that another tracer holds, or that may not be traced, fails the
	// whole capture instead.)
	Err error
	// StopLatency is how long after the capture's first PTRACE_INTERRUPT
	// this thread's stop was seen: a thread that was running, or waiting
	// for a CPU on a busy machine, takes longest.
	StopLatency time.Duration
	// Stopped is how long this thread was stopped: from its stop to its
	// resumption.
	Stopped time.Duration
	// Asleep says the thread was not stopped but left asleep in the
	// kernel, unscheduled throughout the capture (Options.LeaveAsleep):
	// Regs hold only its PC and SP, and Stack is empty, unless
	// Options.BlockedThreads gave its registers (then Regs, TP and Stack
	// are as a stopped thread's).
	Asleep bool

	// switched are the windows of other stacks that this thread's frame
	// pointers led to, copied in its own stop (see copySwitched).
	switched []target.Region
}

// Snapshot is a captured process.
type Snapshot struct {
	PID int
	Exe string // readlink /proc/PID/exe, read before the threads stopped
	// Threads are sorted by TID, the main thread (TID == PID) first.
	Threads []Thread
	// Maps is /proc/PID/maps as read while the threads were stopped.
	Maps []target.Mapping
	// Pause is the time from the first thread stopped (just before the
	// first PTRACE_INTERRUPT) to the last thread resumed (the return of
	// the last PTRACE_DETACH). For WithStopped it includes the callback.
	// For a staggered capture it is the longest time one thread was
	// stopped.
	Pause time.Duration
	// Staggered says that threads slow to stop were copied after the
	// others had been resumed (Options.MaxPause).
	Staggered bool
	// StopWait is the part of Pause spent waiting for the threads to stop
	// (the largest StopLatency, threads created meanwhile included); the
	// rest is copying registers, maps and stacks, and resuming.
	StopWait time.Duration
	// Phases splits Pause into its steps (Capture only; zero for
	// WithStopped).
	Phases PausePhases
	// Mem reads the process's memory: the stack copies first, then the
	// live process (ProcMemory) for anything else, such as text or the
	// [vdso]. After Capture returns, live reads see the running process.
	Mem target.Memory
}

// PausePhases is where a Capture's pause went, in order: Stop (StopWait:
// from the first PTRACE_INTERRUPT until every thread, threads created
// meanwhile included, had stopped and had its registers read), Maps
// (reading /proc/PID/maps, zero when read before the pause), Stacks
// (copying the threads' stacks and the goroutine stacks their frame
// pointers lead to), DuringWait (waiting, after that, for
// Options.During to end) and Resume (detaching every thread). They add
// up to Pause. During is how long Options.During ran, beginning
// DuringStart after the stop: on the helper thread (DuringOnHelper), in
// parallel with Maps and Stacks, or on the tracer thread in DuringWait.
// For a staggered capture only Stop and During are set. Asleep counts
// the threads left asleep (Options.LeaveAsleep), Woke those that ran
// before During ended and were stopped then (During was called again),
// and Check is how long checking the threads left asleep took.
type PausePhases struct {
	Stop, Maps, Stacks, DuringWait, Resume time.Duration
	During, DuringStart                    time.Duration
	DuringOnHelper                         bool
	Asleep, Woke                           int
	Check                                  time.Duration
}

// Errors that classify why a process cannot be captured. Returned errors
// wrap them (test with errors.Is) and carry a message for the user. A
// process that does not exist gives an error wrapping os.ErrNotExist, one
// that cannot be traced for lack of privilege one wrapping
// os.ErrPermission.
var (
	ErrZombie       = errors.New("process is a zombie")
	ErrKernelThread = errors.New("process is a kernel thread")
	ErrSelf         = errors.New("process is the calling process")
	ErrTraced       = errors.New("process is already traced")
	// ErrBusy: another rewind process was capturing the process, and did
	// not let go of it within Options.BusyWait. Errors wrapping it wrap
	// ErrTraced too.
	ErrBusy        = errors.New("process is being captured by another rewind")
	ErrExited      = errors.New("process exited during the capture")
	ErrUnsupported = errors.New("live capture not supported")
	// ErrWaitedChild refuses a child of this process while a thread of
	// this process waits for it. The kernel treats a child traced by its
	// parent's own thread group as a tracee of the whole group: a wait
	// for it from any thread also reports its main thread's ptrace stops
	// (kernel/exit.c, wait_consider_task). A goroutine blocked in
	// os/exec's Cmd.Wait or os.Process.Wait on the child would take the
	// capture's stop: its Wait would return a "stop signal:
	// trace/breakpoint trap" state for a process that still runs (and
	// Cmd.Wait would then hang waiting for the child's output). No way of
	// tracing from this process avoids that, so Capture refuses when it
	// sees such a wait (it cannot see one that starts later).
	ErrWaitedChild = errors.New("process is a child that this process is waiting for")
)

// kindError is an error with its own message that classifies as kind
// (errors.Is(err, kind)) without repeating kind's text.
type kindError struct {
	kind error
	msg  string
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

func kindErrorf(kind error, format string, args ...any) error {
	return &kindError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// Thread returns the captured thread with the given TID, or nil.
func (s *Snapshot) Thread(tid int) *Thread {
	for i := range s.Threads {
		if s.Threads[i].TID == tid {
			return &s.Threads[i]
		}
	}
	return nil
}

// FindMapping returns the mapping that contains addr, or nil.
func (s *Snapshot) FindMapping(addr uint64) *target.Mapping {
	return procmaps.Find(s.Maps, addr)
}
