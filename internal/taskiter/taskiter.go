// Package taskiter reads the threads of a process without stopping them:
// a BPF task iterator (bpf/taskiter.bpf.c) reports, for each thread, its
// scheduler state, its context-switch counts, its fs base and the user
// registers the kernel saved when it entered the kernel. For a thread
// blocked in the kernel those registers are its registers, and they
// cannot change while it stays blocked: read the threads, copy what is
// needed, read them again, and keep each thread whose switch count did
// not move (Thread.Blocked on both reads).
//
// It needs a kernel with BTF and task iterators (5.8), bpf_task_pt_regs
// (5.15), and CAP_BPF with CAP_PERFMON (or root). Only x86-64 is
// implemented; on arm64 the record's register layout differs.
package taskiter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"

	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/regs"
)

// NRegs is the number of registers a Thread holds: x86-64's struct
// pt_regs, r15 first (see Reg*).
const NRegs = 21

// Indexes into Thread.Regs (the kernel's struct pt_regs order).
const (
	RegR15 = iota
	RegR14
	RegR13
	RegR12
	RegBP
	RegBX
	RegR11
	RegR10
	RegR9
	RegR8
	RegAX
	RegCX
	RegDX
	RegSI
	RegDI
	RegOrigAX
	RegIP
	RegCS
	RegFlags
	RegSP
	RegSS
)

// Thread is one thread as the iterator saw it.
type Thread struct {
	TID int
	// State is the task's __state (0: TASK_RUNNING, runnable or on a
	// CPU); OnCPU says it was on a CPU when read.
	State uint32
	OnCPU bool
	// Switches is its voluntary and involuntary context switches.
	Switches uint64
	// FSBase is the thread pointer (glibc's TCB).
	FSBase uint64
	// Regs are the user registers saved on its entry to the kernel;
	// current only while the thread is blocked (Blocked).
	Regs [NRegs]uint64
}

// Blocked reports whether the thread was blocked in the kernel, not
// runnable and not on a CPU, so that its saved registers are its own.
func (t *Thread) Blocked() bool { return t.State != 0 && !t.OnCPU }

// recordSize is the bytes of one record (struct record in the C).
const recordSize = 4*4 + 8*2 + 8*NRegs

// Iter is the loaded iterator program; one Iter serves any number of
// reads, one at a time.
type Iter struct {
	mu   sync.Mutex
	objs taskiterObjects
}

// Open loads the iterator program.
func Open() (*Iter, error) {
	_ = rlimit.RemoveMemlock() // kernels before 5.11 charge BPF memory to it
	it := &Iter{}
	if err := loadTaskiterObjects(&it.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("taskiter: the kernel refused the thread reader: %w", ve)
		}
		return nil, fmt.Errorf("taskiter: loading the thread reader (needs BTF, task iterators and CAP_BPF+CAP_PERFMON): %w", err)
	}
	return it, nil
}

// Close unloads the program.
func (it *Iter) Close() error { return it.objs.Close() }

// maxThreads bounds the records one read returns: more than any process
// runs (the kernel's default threads-max is about 100,000 on 24 GiB).
const maxThreads = 1 << 20

// Threads reads every thread of process pid: the thread group's leader
// first, then the others in the kernel's order (by thread id, which
// puts a thread before the leader once ids wrap around).
func (it *Iter) Threads(pid int) ([]Thread, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("taskiter: bad process id %d", pid)
	}
	it.mu.Lock()
	defer it.mu.Unlock()
	if err := it.objs.Config.Put(uint32(0), uint32(pid)); err != nil {
		return nil, fmt.Errorf("taskiter: %w", err)
	}
	defer it.objs.Config.Put(uint32(0), uint32(0))
	l, err := link.AttachIter(link.IterOptions{Program: it.objs.ReadThreads})
	if err != nil {
		return nil, fmt.Errorf("taskiter: attaching the task iterator: %w", err)
	}
	defer l.Close()
	rd, err := l.Open()
	if err != nil {
		return nil, fmt.Errorf("taskiter: %w", err)
	}
	defer rd.Close()
	b, err := io.ReadAll(io.LimitReader(rd, maxThreads*recordSize+1))
	if err != nil {
		return nil, fmt.Errorf("taskiter: reading the iterator: %w", err)
	}
	ths, err := decode(b)
	if err != nil {
		return nil, err
	}
	return leaderFirst(ths, pid), nil
}

// leaderFirst moves thread pid (the leader) to the front of ths,
// keeping the others' order.
func leaderFirst(ths []Thread, pid int) []Thread {
	for i := range ths {
		if ths[i].TID == pid {
			l := ths[i]
			copy(ths[1:i+1], ths[:i])
			ths[0] = l
			break
		}
	}
	return ths
}

// decode parses the iterator's records.
func decode(b []byte) ([]Thread, error) {
	if len(b)%recordSize != 0 || len(b) > maxThreads*recordSize {
		return nil, fmt.Errorf("taskiter: %d bytes of records, not a whole number of %d-byte records of at most %d threads", len(b), recordSize, maxThreads)
	}
	out := make([]Thread, 0, len(b)/recordSize)
	le := binary.LittleEndian
	for off := 0; off < len(b); off += recordSize {
		r := b[off : off+recordSize]
		t := Thread{TID: int(le.Uint32(r)), State: le.Uint32(r[4:]), OnCPU: le.Uint32(r[8:]) != 0,
			Switches: le.Uint64(r[16:]), FSBase: le.Uint64(r[24:])}
		for i := range t.Regs {
			t.Regs[i] = le.Uint64(r[32+8*i:])
		}
		out = append(out, t)
	}
	return out, nil
}

// Blocked returns the threads of process pid that are blocked in the
// kernel, as live.Options.BlockedThreads takes them.
func (it *Iter) Blocked(pid int) ([]live.BlockedThread, error) {
	ths, err := it.Threads(pid)
	if err != nil {
		return nil, err
	}
	var out []live.BlockedThread
	words := make([]uint64, regs.UserRegsWords(regs.AMD64))
	for i := range ths {
		t := &ths[i]
		if !t.Blocked() {
			continue
		}
		copy(words, t.Regs[:])
		words[regs.AMD64UserFSBase] = t.FSBase
		r, err := regs.FromUser(regs.AMD64, words)
		if err != nil {
			return nil, err
		}
		out = append(out, live.BlockedThread{TID: t.TID, Regs: r, TP: t.FSBase, Syscall: int(int64(t.Regs[RegOrigAX]))})
	}
	return out, nil
}
