// Package goassist copies, at each perf sample taken on a Go thread's
// system stack (g0), the memory a walk in user space needs to cross to
// the goroutine above the switch: the thread's g0, its m's g0 and curg
// words, the goroutine's g (curg.sched, its stack bounds) and the
// goroutine's stack from curg.sched.sp. A perf sample's stack copy holds
// g0's stack alone, so without it a walk stops at runtime.morestack, and
// runtime.systemstack's callers are lost.
//
// A small BPF program (bpf/goassist.bpf.c) is attached to the sampling
// events (perfevent.Options.Assist); it runs on every sample before the
// kernel writes it, and for a thread of a Go process registered here
// whose g register (r14) holds its m's g0, sends a record stamped with
// the thread and CLOCK_MONOTONIC, the clock the sampling events then use.
// Assist pairs each sample with its record by thread and time
// (profiles.SampleMemory). The process a recording starts with is
// registered before it runs (Register: its executable's runtime offsets,
// from internal/goruntime); others, at their first sample, in the
// background, so that their first milliseconds go without.
package goassist

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/rewindstack/rewind/internal/goruntime"
	"github.com/rewindstack/rewind/target"
)

// Layout of a record (struct record in bpf/goassist.bpf.c).
const (
	gBytes     = 256
	hdrBytes   = 80
	curgAt     = hdrBytes + gBytes
	stackAt    = curgAt + gBytes
	recCurG    = 1
	maxPending = 64 << 20 // bytes of records kept waiting for their samples
	// window is how far a record's time may lie from its sample's (tens
	// of microseconds were seen: the kernel walks the user stack's
	// frame pointers for the callchain in between).
	window = 250 * time.Microsecond
	// keepFor is how long a record not yet paired is kept (samples are
	// read from the perf ring buffers in bursts).
	keepFor = 2 * time.Second
)

// goproc is what the program reads of a Go process (struct goproc).
type goproc struct {
	GM, GSchedSP, GStackLo, GStackHi uint16
	MG0, MCurG                       uint16
	GLen                             uint16
	_                                uint16
}

// record is one decoded record: the memory it copied.
type record struct {
	time, sp uint64 // the sample's time and user SP
	regions  []target.Region
}

// Stats counts what the assist did.
type Stats struct {
	// Sent is how many records the program sent; Full, how many it had
	// no room for in the ring; Unreadable, samples on g0 whose g or m
	// could not be read.
	Sent, Full, Unreadable uint64
	// NotG counts samples of Go processes whose g register held no g
	// (C code, a signal handler), OnG those on a goroutine's stack.
	NotG, OnG uint64
	// Paired is how many samples got a record's memory; Dropped, how many
	// records no sample took (their sample lost, or read too late).
	Paired, Dropped uint64
	// Processes is how many Go processes were registered.
	Processes int
}

// Assist is a loaded assist program and the records it sent.
type Assist struct {
	objs goassistObjects
	rd   *ringbuf.Reader

	mu    sync.Mutex
	q     queue
	seen  map[int]bool    // processes registered or found not Go
	procs map[int]*goproc // registered, by process
	work  chan int        // processes to register
	buf   ringbuf.Record

	stop chan struct{}
	done sync.WaitGroup
}

// Load loads the assist program. It needs what BPF needs (root, or
// CAP_BPF and CAP_PERFMON) and a kernel with BTF (5.15 or later, for
// bpf_task_pt_regs).
func Load() (*Assist, error) {
	spec, err := loadGoassist()
	if err != nil {
		return nil, err
	}
	n, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, err
	}
	spec.Maps["scratch"].MaxEntries = uint32(n)
	a := &Assist{q: queue{byTID: map[int][]record{}}, seen: map[int]bool{}, procs: map[int]*goproc{},
		work: make(chan int, 256), stop: make(chan struct{})}
	if err := spec.LoadAndAssign(&a.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("the kernel's verifier refused the Go assist: %v", firstLine(ve.Error()))
		}
		return nil, fmt.Errorf("loading the Go assist: %w", err)
	}
	if a.rd, err = ringbuf.NewReader(a.objs.Events); err != nil {
		a.objs.Close()
		return nil, err
	}
	// Reads never wait: a deadline in the past.
	a.rd.SetDeadline(time.Unix(1, 0))
	a.done.Add(2)
	go a.registrar()
	go a.drainer()
	return a, nil
}

func firstLine(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			return s[:i]
		}
	}
	return s
}

// Program is the file descriptor of the program to attach to the
// sampling events (perfevent.Options.Assist).
func (a *Assist) Program() int { return a.objs.GoAssist.FD() }

// Close detaches nothing (closing the events does) and frees the program,
// its maps and the records.
func (a *Assist) Close() error {
	close(a.stop)
	a.done.Wait()
	a.rd.Close()
	return a.objs.Close()
}

// Register describes process pid to the program now, from its executable
// exe ("": /proc/PID/exe), rather than at its first sample: for the
// process a recording starts with, so that no sample of its first
// milliseconds goes without. A process that is not Go is left alone.
func (a *Assist) Register(pid int, exe string) {
	if exe == "" {
		exe = fmt.Sprintf("/proc/%d/exe", pid)
	}
	gp := offsetsOf(exe)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seen[pid] = true
	if gp != nil && a.objs.Procs.Put(uint32(pid), gp) == nil {
		a.procs[pid] = gp
	}
}

// Exec forgets what was registered of process pid (it ran exec): its next
// sample registers it again.
func (a *Assist) Exec(pid int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.seen, pid)
	if a.procs[pid] != nil {
		delete(a.procs, pid)
		a.objs.Procs.Delete(uint32(pid))
	}
}

// Stats returns the counts so far.
func (a *Assist) Stats() Stats {
	var st Stats
	for i, p := range []*uint64{&st.Sent, &st.Full, &st.Unreadable, &st.NotG, &st.OnG} {
		var per []uint64
		if a.objs.Stats.Lookup(uint32(i), &per) == nil {
			for _, v := range per {
				*p += v
			}
		}
	}
	a.mu.Lock()
	st.Paired, st.Dropped, st.Processes = a.q.paired, a.q.dropped, len(a.procs)
	a.mu.Unlock()
	return st
}

// drainer moves the ring's records to the queue every few milliseconds, so
// that the ring does not fill between two bursts of samples.
func (a *Assist) drainer() {
	defer a.done.Done()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-t.C:
			a.mu.Lock()
			a.drainLocked()
			a.mu.Unlock()
		}
	}
}

// SampleMemory returns the memory the program copied for the sample of
// thread tid of process pid taken at time t (CLOCK_MONOTONIC
// nanoseconds) with user stack pointer sp, nil when it copied none. It registers pid on its first
// sample.
func (a *Assist) SampleMemory(pid, tid int, t, sp uint64) []target.Region {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.seen[pid] {
		select {
		case a.work <- pid:
			a.seen[pid] = true
		default: // asked again at its next sample
		}
	}
	a.drainLocked()
	return a.q.take(tid, t, sp)
}

// drainLocked moves every record in the ring to the queue.
func (a *Assist) drainLocked() {
	if a.rd.AvailableBytes() == 0 {
		return
	}
	for a.rd.ReadInto(&a.buf) == nil { // until none is left: the deadline is past
		if tid, r, ok := decode(a.buf.RawSample, a.procs); ok {
			a.q.add(tid, r)
		} else {
			a.q.dropped++
		}
	}
	a.q.trim()
}

// registrar reads the runtime offsets of the processes SampleMemory saw
// first, one at a time, and describes the Go ones to the program.
func (a *Assist) registrar() {
	defer a.done.Done()
	for {
		select {
		case <-a.stop:
			return
		case pid := <-a.work:
			gp := offsetsOf(fmt.Sprintf("/proc/%d/exe", pid))
			if gp == nil {
				continue
			}
			a.mu.Lock()
			if a.seen[pid] { // not exec'd meanwhile
				if a.objs.Procs.Put(uint32(pid), gp) == nil {
					a.procs[pid] = gp
				}
			}
			a.mu.Unlock()
		}
	}
}

// offsetsOf reads the offsets the program needs from the executable exe;
// nil when it is not Go or they cannot be read.
func offsetsOf(exe string) *goproc {
	l, err := goruntime.OpenOffsets(exe)
	if err != nil {
		return nil
	}
	g, m := l.G, l.M
	end := 0
	for _, off := range []int{g.M, g.SchedSP, g.SchedPC, g.SchedBP, g.SchedLR, g.StackLo, g.StackHi} {
		end = max(end, off+8)
	}
	ok := func(offs ...int) bool {
		for _, o := range offs {
			if o < 0 || o > 0xfff0 {
				return false
			}
		}
		return true
	}
	if end > gBytes || !ok(g.M, g.SchedSP, g.StackLo, g.StackHi, m.G0, m.CurG) || m.CurG == 0 {
		return nil
	}
	return &goproc{GM: uint16(g.M), GSchedSP: uint16(g.SchedSP), GStackLo: uint16(g.StackLo), GStackHi: uint16(g.StackHi),
		MG0: uint16(m.G0), MCurG: uint16(m.CurG), GLen: uint16(end)}
}
