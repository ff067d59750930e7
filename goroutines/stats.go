package goroutines

import (
	"sync/atomic"
	"time"

	"github.com/rewindstack/rewind/live"
)

// ReadStats is what the read of the goroutines in a live capture's pause
// cost: its time (Wall), and this process's CPU time over it (User, Sys:
// the kernel's copying is system time), split into its steps: List
// (runtime.allgs and its pointers), Gs (reading the gs, and comparing
// them with the read before the pause), Stacks (the stacks and Ms of the
// goroutines not kept) and Labels (pprof labels); Faults counts this
// process's page faults over it (each costs microseconds, more in a
// virtual machine: the read's buffers are faulted in before the pause).
// Again says the read compared with the read before the pause, Kept how many goroutines'
// stacks were taken from that read; Reads, Iovecs and Bytes count the
// process_vm_readv calls (and their ranges and bytes) made in the pause;
// Unread, the ranges left unread at the pause's bound.
type ReadStats struct {
	Wall, User, Sys          time.Duration
	List, Gs, Stacks, Labels time.Duration
	Again                    bool
	Goroutines, Kept         int
	Reads, Iovecs, Bytes     int64
	Faults                   int64
	// Unread counts the reads not made because the pause reached its
	// bound (live.Options.MaxPause from the read's start).
	Unread int64

	clock phaseClock
}

// phaseClock times the steps of a read; its zero value times nothing.
type phaseClock struct{ last time.Time }

func (c *phaseClock) start() { c.last = time.Now() }

// lap adds the time since the last lap (or start) to *d.
func (c *phaseClock) lap(d *time.Duration) {
	if c == nil || c.last.IsZero() {
		return
	}
	now := time.Now()
	*d += now.Sub(c.last)
	c.last = now
}

// statReader counts the reads of the batchReader it wraps into st.
type statReader struct {
	rd batchReader
	st *ReadStats
	// deadline, when not zero, is the pause's bound (live.Reader.Deadline):
	// the reads asked for after it are not made (st.Unread counts them).
	deadline time.Time
}

// boundChunk is the most bytes asked for between two looks at the clock.
const boundChunk = 4 << 20

func (r *statReader) ReadBatch(reads []live.Read) {
	if r.deadline.IsZero() {
		r.read(reads)
		return
	}
	for i := 0; i < len(reads); {
		if time.Now().After(r.deadline) {
			for k := i; k < len(reads); k++ {
				reads[k].N = 0
			}
			atomic.AddInt64(&r.st.Unread, int64(len(reads)-i))
			return
		}
		j, n := i, 0
		for j < len(reads) && (j == i || n+len(reads[j].Buf) <= boundChunk) {
			n += len(reads[j].Buf)
			j++
		}
		r.read(reads[i:j])
		i = j
	}
}

func (r *statReader) read(reads []live.Read) {
	if len(reads) == 0 {
		return
	}
	r.rd.ReadBatch(reads)
	// A call per iovMax ranges, more when one stops short (rare).
	n := 0
	for i := range reads {
		n += reads[i].N
	}
	atomic.AddInt64(&r.st.Reads, int64(len(reads)+1023)/1024)
	atomic.AddInt64(&r.st.Iovecs, int64(len(reads)))
	atomic.AddInt64(&r.st.Bytes, int64(n))
}

// pastBound reports whether rd left reads unmade at the pause's bound.
func pastBound(rd batchReader) bool {
	st := statsOf(rd)
	return st != nil && atomic.LoadInt64(&st.Unread) > 0
}

// statsOf returns the ReadStats that rd counts into, or nil.
func statsOf(rd batchReader) *ReadStats {
	if r, ok := rd.(*statReader); ok {
		return r.st
	}
	return nil
}

// Steps of a read, for lap.
const (
	stepList = iota
	stepGs
	stepStacks
	stepLabels
)

// lap ends a step of the read rd makes, when rd keeps stats.
func lap(rd batchReader, step int) {
	st := statsOf(rd)
	if st == nil {
		return
	}
	switch step {
	case stepList:
		st.clock.lap(&st.List)
	case stepGs:
		st.clock.lap(&st.Gs)
	case stepStacks:
		st.clock.lap(&st.Stacks)
	case stepLabels:
		st.clock.lap(&st.Labels)
	}
}
