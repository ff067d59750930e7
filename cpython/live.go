package cpython

import (
	"bytes"
	"strconv"

	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/target"
)

// Live reads the Python stacks of a running process in the same pause as
// its threads: Prepare walks them while the process runs, recording every
// read; During (live.Options.During) re-reads all of it in the pause, in
// a few batched reads, and keeps that walk when nothing changed, or walks
// again in the pause (over the re-read copies and the stopped process)
// when something did. Stacks then gives the stacks of the pause's
// instant.
type Live struct {
	rt  *Runtime
	pid int

	rec      recorder
	prior    *Stacks
	priorErr error

	reads  []live.Read
	co     live.Coalescing
	stacks *Stacks
	err    error
	// Rewalked reports that the stacks changed between Prepare and the
	// pause, so During walked them again.
	Rewalked bool
}

// NewLive returns a Live reader of process pid, whose runtime is rt.
func NewLive(pid int, rt *Runtime) *Live { return &Live{rt: rt, pid: pid} }

// Prepare walks the stacks before the pause, and sets up the buffers
// the pause's re-read fills.
func (l *Live) Prepare() {
	l.rec = recorder{mem: live.NewReader(l.pid)}
	l.prior, l.priorErr = l.rt.Read(&l.rec)
	total := 0
	l.reads = make([]live.Read, len(l.rec.reads))
	for _, r := range l.rec.reads {
		total += len(r.data)
	}
	slab := make([]byte, total)
	off := 0
	for i, r := range l.rec.reads {
		l.reads[i] = live.Read{Addr: r.addr, Buf: slab[off : off+len(r.data) : off+len(r.data)]}
		off += len(r.data)
	}
	l.co.Gap = 4 << 10
	l.co.Prepare(total + total/2 + 64<<10)
}

// During re-reads, in the pause, what Prepare read; see live.Options.During.
func (l *Live) During(r *live.Reader) {
	l.co.R = r
	l.co.ReadBatch(l.reads)
	same := l.priorErr == nil
	for i := range l.reads {
		if !same {
			break
		}
		rd := &l.reads[i]
		same = rd.N == len(rd.Buf) && bytes.Equal(rd.Buf, l.rec.reads[i].data)
	}
	if same {
		l.stacks, l.err = l.prior, nil
		return
	}
	l.Rewalked = true
	pm := &pauseMem{next: r, copies: make(map[uint64][]byte, len(l.reads))}
	for i := range l.reads {
		if rd := &l.reads[i]; rd.N == len(rd.Buf) {
			pm.copies[rd.Addr] = rd.Buf
		}
	}
	l.stacks, l.err = l.rt.Read(pm)
}

// Stacks returns the stacks as they were in the pause (as Prepare found
// them when During did not run: a capture that failed).
func (l *Live) Stacks() (*Stacks, error) {
	if l.stacks == nil && l.err == nil {
		return l.prior, l.priorErr
	}
	return l.stacks, l.err
}

// recorder is a Memory that keeps a copy of every read that succeeded.
type recorder struct {
	mem   target.Memory
	reads []recorded
}

type recorded struct {
	addr uint64
	data []byte
}

func (r *recorder) ReadMemory(addr uint64, p []byte) error {
	if err := r.mem.ReadMemory(addr, p); err != nil {
		return err
	}
	r.reads = append(r.reads, recorded{addr, bytes.Clone(p)})
	return nil
}

// pauseMem serves the reads re-done in the pause from their copies, and
// the rest from the stopped process.
type pauseMem struct {
	next   target.Memory
	copies map[uint64][]byte
}

func (m *pauseMem) ReadMemory(addr uint64, p []byte) error {
	if c, ok := m.copies[addr]; ok && len(c) >= len(p) {
		copy(p, c)
		return nil
	}
	return m.next.ReadMemory(addr, p)
}

// Attach gives each thread context of t that a Python thread state runs
// on (matched by native thread id) its Python frames, spliced by the
// outputs above the _PyEval_EvalFrameDefault frame of their activation.
// A chain cut short is said through warn.
func Attach(t *target.Target, s *Stacks, warn func(string)) {
	byTID := map[int]*Thread{}
	for i := range s.Threads {
		byTID[s.Threads[i].TID] = &s.Threads[i]
	}
	for i := range t.Contexts {
		c := &t.Contexts[i]
		th := byTID[c.TID]
		if c.Kind != target.KindThread || th == nil {
			continue
		}
		c.Interp = c.Interp[:0]
		for _, f := range th.Frames {
			c.Interp = append(c.Interp, target.InterpFrame{Function: f.Function, File: f.File,
				Line: max(f.Line, 0), Method: "python", Activation: f.Activation})
		}
		c.InterpBefore = EvalFunction
		if th.End != "" && warn != nil {
			warn("thread " + strconv.Itoa(th.TID) + ": Python frame chain cut (" + th.End + "): " + th.Detail)
		}
	}
}

// EvalFunction is the native function each of whose activations runs a
// thread's Python frames.
const EvalFunction = "_PyEval_EvalFrameDefault"
