// Package live captures the threads of a running process as a snapshot:
// registers and stack copies taken while the threads are stopped for as
// short a time as possible, plus the process's mappings. Unwinding happens
// afterwards, from the copies ("freeze, copy, resume, unwind offline").
//
// # How a capture works
//
// Capture (and WithStopped) run every ptrace request from one dedicated OS
// thread, because the kernel ties a tracee to the thread that attached it,
// not to the process. The thread is started on first use and lives as long
// as the process (a goroutine locked to it serves requests over a
// channel); it must not exit after a capture, because a child started with
// Pdeathsig gets that signal when the thread that forked it exits, and the
// Go runtime may have forked it from that very thread.
//
// Before anything stops, the process is checked (it exists, is not this
// process, a zombie or a kernel thread), and the buffers the pause will
// fill are allocated and faulted in. Then:
//
//  1. PTRACE_SEIZE every thread listed in /proc/PID/task (SEIZE does not
//     stop anything and queues no SIGSTOP), then PTRACE_INTERRUPT each of
//     them, then collect the stops. /proc/PID/task is read again until no
//     new thread shows up: a thread being created while the others stop is
//     caught, and once every listed thread is stopped none can be created.
//  2. As each stop is reported, PTRACE_GETREGSET NT_PRSTATUS reads the
//     registers. Then /proc/PID/maps is read (with every thread stopped,
//     nothing can change it), and one process_vm_readv call with one
//     iovec per thread copies every stack, from SP-128 (the red zone)
//     upward to the end of the mapping that holds SP, at most MaxStack
//     bytes. Options.During, when set, runs meanwhile on a second thread
//     of this process (it makes no ptrace request), raised in priority
//     like the tracer's: on two CPUs it reads while the stacks are copied.
//  3. PTRACE_DETACH every thread. A stop that intercepted a signal on its
//     way to the thread (a signal-delivery-stop) passes that signal on, so
//     no signal is lost; a thread that was in a group-stop (SIGSTOP, ^Z)
//     before the capture goes back to it.
//
// While the threads are being stopped, the SIGCHLD action of this process
// carries SA_NOCLDSTOP (when a handler is installed: Go installs one), so
// that no stop raises a signal here: each would cost the stopping threads
// CPU time. The maps text is parsed, and thread names read, after the
// threads run again. Pause is measured from just before the first
// PTRACE_INTERRUPT to the return of the last PTRACE_DETACH, so it bounds
// the time any thread spent stopped (Thread.Stopped is each thread's
// own, shorter). On a 2-CPU virtual machine, a 17-thread process pauses
// for about half a millisecond, mostly in waking each thread to stop it
// and again to resume it (BenchmarkCapture); for 101 threads that alone
// takes milliseconds, and a capture's pause stays within about half a
// millisecond of it (BenchmarkFloor).
//
// # Threads left asleep
//
// With Options.LeaveAsleep, a thread blocked in the kernel when the
// capture begins need not be stopped at all: one that is not scheduled
// runs no instruction and changes no memory, and the kernel counts its
// runs (/proc/PID/task/TID/schedstat). Its count is read, then
// /proc/PID/task/TID/syscall, which names a system call (and the user PC
// and SP) only for a thread blocked off its CPU; a thread found so, and
// that LeaveAsleep leaves, is not seized. When During returns, each such
// thread's count is read again: one that ran meanwhile is stopped then,
// its stack copied, and During called again, until During returns with no
// thread left asleep having run. What During reads is then what it would
// have read with every thread stopped, and the threads left asleep never
// noticed the capture. A goroutine dump needs no registers of an idle M,
// nor of a goroutine blocked in a system call of Go's own: an idle Go
// program is dumped without stopping any thread (on a loaded 2-CPU
// machine, where each woken thread waited about a millisecond for a
// CPU, that wait was most of a pause).
//
// # Never leaving the target stopped
//
// Because PTRACE_SEIZE is used instead of PTRACE_ATTACH, no SIGSTOP is ever
// queued, so nothing can leave the target in a group-stop. Detach runs on
// every path: errors, a panic in WithStopped's function, and the target
// exiting meanwhile (the tracer then reaps the dead threads, which would
// otherwise stay zombies attached to it). If the capturing process dies,
// even by SIGKILL in the middle of a capture, the kernel's exit_ptrace
// detaches every tracee as the tracer thread exits and wakes the ones in
// a ptrace stop; the tests check this by killing a capturing child process
// mid-pause. A thread that does not stop within StopTimeout (one in
// uninterruptible sleep) cannot be detached yet: the tracer keeps polling
// it between requests and detaches it as soon as it stops.
//
// # Waiting for stops without hanging
//
// The stops are collected with wait4(tid, WNOHANG|__WALL) polling rather
// than blocking waits. The kernel reports a tracee's stop to any thread of
// the tracer's process that waits for it, so another goroutine's wait can
// take a report meant for the tracer; polling notices such a stop anyway
// (a register read succeeds only on a stopped tracee), and bounds the wait
// for a thread that does not stop (see StopTimeout).
//
// The one case where that other wait is likely is a target that is a child
// of the capturing process, with a goroutine blocked in os/exec's Cmd.Wait
// on it (fixture programs started by a test, say): that goroutine takes
// the main thread's stop and its Wait returns for a process that still
// runs. Capture cannot prevent that from inside the process, so it refuses
// such a target with ErrWaitedChild when it sees the wait (in
// /proc/self/task/*/syscall). Start targets without a concurrent Wait
// (reap them after killing them), or capture from another process.
//
// # Another tracer, and targets that die
//
// A thread has one tracer at a time: PTRACE_SEIZE of a thread that
// another tracer holds fails (EPERM), as it does for a thread that has
// begun to exit and for one the kernel does not let this process trace.
// The capture tells these apart from the thread's stat flags
// (PF_EXITING) and TracerPid. An exiting thread is reported with Err. A
// thread held by another tracer fails the capture, after the threads
// seized so far are stopped and let go again: a snapshot never lacks a
// thread for that reason (one that this process's tracer still holds,
// because an earlier capture interrupted it and it has not stopped since,
// is reported with Err like one that did not stop in time). When the tracer is another rewind (named
// rewind, or running this program's executable), which is capturing the
// same process, the capture waits until that one lets go of the thread
// (polling its TracerPid, within Options.BusyWait) and starts again;
// else, or when the time is up, it fails naming that process (ErrBusy,
// ErrTraced). Only an EPERM repeated on an untraced live thread is a
// permission error.
//
// Threads that exit during a capture are reported with Err, but a
// capture that stopped no thread at all (the process was killed as its
// threads were being seized) fails with ErrExited instead of returning an
// empty snapshot; so does WithStopped whose process died while its
// function ran past MaxStopped.
//
// # Threads and what is frozen
//
// Options.Threads selects threads: only those are stopped and copied, the
// others keep running. A thread's stack is only written by that thread, so
// its copy is consistent without stopping the rest, and the target is
// disturbed less. Selected TIDs that are not threads of the process come
// back as Threads with Err set.
package live
