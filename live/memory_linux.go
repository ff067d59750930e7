package live

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/rewindstack/rewind/target"
)

// ProcMemory reads a live process's memory with process_vm_readv, one
// system call per read. Where process_vm_readv is not permitted (a seccomp
// filter that rejects it, as some container runtimes install, gives
// EPERM or ENOSYS) it falls back, for good, to pread on /proc/PID/mem,
// which differs in one way: like ptrace, it also reads pages the process
// itself may not read (PROT_NONE). Errors are *target.MemoryError whose
// Addr is the first byte that could not be read. It is safe for
// concurrent use; Close must not race with reads.
type ProcMemory struct {
	pid      int
	tid      atomic.Int64 // the thread whose id the reads use
	fallback atomic.Bool  // process_vm_readv refused: use /proc/PID/mem

	memOnce sync.Once
	mem     *os.File
	memErr  error
}

// NewProcMemory returns a reader of process pid's memory.
func NewProcMemory(pid int) *ProcMemory {
	m := &ProcMemory{pid: pid}
	m.tid.Store(int64(pid))
	return m
}

// ReadMemory implements target.Memory: it fills p from addr or fails.
func (m *ProcMemory) ReadMemory(addr uint64, p []byte) error {
	if len(p) == 0 {
		return nil
	}
	if addr+uint64(len(p)) < addr {
		return &target.MemoryError{Addr: addr, Err: errors.New("range wraps around")}
	}
	if !m.fallback.Load() {
		tid := int(m.tid.Load())
		n, err := vmRead(tid, addr, p)
		if n == 0 && err == unix.ESRCH {
			// The thread has exited (the main thread can exit and
			// leave the others running): read through another one.
			if other := m.liveThread(tid); other != 0 {
				n, err = vmRead(other, addr, p)
			}
		}
		if n == len(p) {
			return nil
		}
		if err == nil {
			// A short read stops at the first page that is not mapped.
			return &target.MemoryError{Addr: addr + uint64(n), Err: unix.EFAULT}
		}
		if err != unix.EPERM && err != unix.ENOSYS {
			return &target.MemoryError{Addr: addr, Err: err}
		}
		m.fallback.Store(true)
	}
	return m.preadMem(addr, p)
}

// liveThread finds a thread of the process other than dead, remembers it
// for later reads and returns it, or returns 0.
func (m *ProcMemory) liveThread(dead int) int {
	tids, err := listTasks(m.pid)
	if err != nil {
		return 0
	}
	for _, tid := range tids {
		if tid != dead && !taskGone(m.pid, tid) {
			m.tid.CompareAndSwap(int64(dead), int64(tid))
			return tid
		}
	}
	return 0
}

func (m *ProcMemory) preadMem(addr uint64, p []byte) error {
	m.memOnce.Do(func() {
		m.mem, m.memErr = os.Open(fmt.Sprintf("/proc/%d/task/%d/mem", m.pid, m.tid.Load()))
	})
	if m.memErr != nil {
		return &target.MemoryError{Addr: addr, Err: m.memErr}
	}
	done := 0
	for done < len(p) {
		// The offset is the address; addresses above 1<<63 do not fit
		// pread's signed offset and are never user memory on amd64.
		off := addr + uint64(done)
		if off > 1<<63-1 {
			return &target.MemoryError{Addr: off, Err: unix.EFAULT}
		}
		n, err := unix.Pread(int(m.mem.Fd()), p[done:], int64(off))
		if n > 0 {
			done += n
			continue
		}
		if err == unix.EINTR {
			continue
		}
		if err == nil {
			err = unix.EFAULT
		}
		return &target.MemoryError{Addr: off, Err: err}
	}
	return nil
}

// Close releases the /proc/PID/mem file the fallback may have opened.
func (m *ProcMemory) Close() error {
	m.memOnce.Do(func() { m.memErr = os.ErrClosed })
	if m.mem != nil {
		err := m.mem.Close()
		m.mem = nil
		m.memErr = os.ErrClosed
		return err
	}
	return nil
}

// vmRead reads len(p) bytes at addr in pid with one process_vm_readv.
// n is the number of bytes read; err is set only when n == 0.
func vmRead(pid int, addr uint64, p []byte) (int, error) {
	local := [1]unix.Iovec{{Base: &p[0]}}
	local[0].SetLen(len(p))
	remote := [1]unix.RemoteIovec{{Base: uintptr(addr), Len: len(p)}}
	return processVMReadv(pid, local[:], remote[:])
}

// processVMReadv is process_vm_readv, retried on EINTR.
func processVMReadv(pid int, local []unix.Iovec, remote []unix.RemoteIovec) (int, error) {
	for {
		n, err := unix.ProcessVMReadv(pid, local, remote, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		return n, nil
	}
}
