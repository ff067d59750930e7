package goassist

import (
	"encoding/binary"
	"sort"

	"github.com/rewindstack/rewind/target"
)

// queue holds the records not yet taken by their samples, per thread in
// time order (a thread runs on one CPU at a time, so its records reach
// the ring in the order they were taken).
type queue struct {
	byTID   map[int][]record
	pending int    // bytes of memory in byTID
	latest  uint64 // the latest sample time asked for
	paired  uint64
	dropped uint64
	// maxPending and keepFor bound what is kept (0: the defaults).
	maxPending int
	keepFor    uint64
}

// add appends thread tid's record r.
func (q *queue) add(tid int, r record) {
	rs := q.byTID[tid]
	if n := len(rs); n > 0 && rs[n-1].time > r.time {
		q.dropped++ // out of order: not a record this program sent
		return
	}
	q.byTID[tid] = append(rs, r)
	q.pending += r.bytes()
}

// take returns the memory of the record of thread tid's sample taken at
// t with user stack pointer sp, nil when there is none, and removes that
// record: the one with that SP nearest t within window. The kernel stamps
// a sample just before the program runs (just after it before Linux
// 6.10); a thread's samples lie a sampling period apart, but the first
// periods of a recording in frequency mode are microseconds long, and a
// sample with no record (on a goroutine's stack) must not take its
// neighbour's: the SP tells them apart.
func (q *queue) take(tid int, t, sp uint64) []target.Region {
	q.latest = max(q.latest, t)
	rs := q.byTID[tid]
	w := uint64(window)
	i := sort.Search(len(rs), func(i int) bool { return rs[i].time+w >= t })
	best := -1
	for j := i; j < len(rs) && rs[j].time <= t+w; j++ {
		if rs[j].sp != sp {
			continue
		}
		if best < 0 || absDiff(rs[j].time, t) < absDiff(rs[best].time, t) {
			best = j
		}
	}
	if best < 0 {
		return nil
	}
	// Only the record taken goes: the samples of a thread that moved
	// between CPUs are read out of order (one CPU's ring buffer after
	// the other), and the older records are for samples still to come.
	// trim drops those left behind.
	r := rs[best]
	q.pending -= r.bytes()
	if len(rs) == 1 {
		delete(q.byTID, tid)
	} else {
		q.byTID[tid] = append(rs[:best:best], rs[best+1:]...)
	}
	q.paired++
	return r.regions
}

// trim drops the records older than keepFor before the latest sample,
// then, while more than maxPending bytes are kept, the older half of
// what is left (only when samples stall).
func (q *queue) trim() {
	keep, most := q.keepFor, q.maxPending
	if keep == 0 {
		keep = uint64(keepFor)
	}
	if most == 0 {
		most = maxPending
	}
	cut := uint64(0)
	if q.latest > keep {
		cut = q.latest - keep
	}
	q.dropBefore(cut)
	for q.pending > most {
		oldest, newest := ^uint64(0), uint64(0)
		for _, rs := range q.byTID {
			oldest = min(oldest, rs[0].time)
			newest = max(newest, rs[len(rs)-1].time)
		}
		q.dropBefore(oldest + (newest-oldest)/2 + 1)
	}
}

func (q *queue) dropBefore(cut uint64) {
	for tid, rs := range q.byTID {
		i := 0
		for i < len(rs) && rs[i].time < cut {
			q.pending -= rs[i].bytes()
			q.dropped++
			i++
		}
		switch {
		case i == len(rs):
			delete(q.byTID, tid)
		case i > 0:
			q.byTID[tid] = rs[i:]
		}
	}
}

func (r record) bytes() int {
	n := 0
	for _, reg := range r.regions {
		n += len(reg.Data)
	}
	return n
}

// decode makes a record's regions from its bytes b (struct record in
// bpf/goassist.bpf.c), in memory of their own (the ring's is reused),
// for a process described in procs. It returns the record's thread.
func decode(b []byte, procs map[int]*goproc) (int, record, bool) {
	le := binary.LittleEndian
	if len(b) < stackAt {
		return 0, record{}, false
	}
	tid, pid := int(le.Uint32(b[0:])), int(le.Uint32(b[4:]))
	r := record{time: le.Uint64(b[8:]), sp: le.Uint64(b[72:])}
	g, m, curg := le.Uint64(b[16:]), le.Uint64(b[24:]), le.Uint64(b[32:])
	stackAddr, stackLen := le.Uint64(b[56:]), int(le.Uint32(b[64:]))
	glen, flags := int(le.Uint16(b[68:])), le.Uint16(b[70:])
	gp := procs[pid]
	if gp == nil || glen < 8 || glen > gBytes || stackLen > len(b)-stackAt {
		return 0, record{}, false // (a process forgotten since: Exec)
	}
	mem := make([]byte, 0, 2*glen+16+stackLen)
	add := func(addr uint64, data []byte) {
		at := len(mem)
		mem = append(mem, data...)
		r.regions = append(r.regions, target.Region{Addr: addr, Data: mem[at:len(mem):len(mem)]})
	}
	add(g, b[hdrBytes:hdrBytes+glen])
	add(m+uint64(gp.MG0), b[40:48])
	add(m+uint64(gp.MCurG), b[48:56])
	if flags&recCurG != 0 && curg != g {
		add(curg, b[curgAt:curgAt+glen])
	}
	if stackLen > 0 {
		add(stackAddr, b[stackAt:stackAt+stackLen])
	}
	return tid, r, true
}

func absDiff(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}
