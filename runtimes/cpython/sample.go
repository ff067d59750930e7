package cpython

import (
	"fmt"
	"time"

	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/runtimes"
	"github.com/rewindstack/rewind/target"
)

// Bounds on one sample's read: the pages a walk keeps (the rest are read
// piece by piece), its bytes and its time. A sample's chain is a few
// frames in one or two data stack chunks, and its code objects.
const (
	maxSamplePages  = 256
	sampleBudget    = 4 << 20
	sampleWalkTime  = 100 * time.Millisecond
	tstateRefresh   = 100 * time.Millisecond // the fewest between two reads of the thread list
	sampleTries     = 3
	maxSampleFrames = 1 << 12
)

func (registered) SampleProcess(pid int, maps []target.Mapping) (runtimes.SampleProcess, error) {
	mem := live.NewProcMemory(pid)
	rt, err := Find(maps, mem, runtimes.ProcessFile(pid))
	if rt == nil {
		mem.Close()
		if err != nil {
			return nil, fmt.Errorf("Python frames of process %d: %v", pid, err)
		}
		return nil, nil
	}
	return newSampler(rt, mem, func() { mem.Close() }), nil
}

// newSampler returns a sampler of rt's process through mem; closeMem,
// when not nil, releases mem.
func newSampler(rt *Runtime, mem target.Memory, closeMem func()) *sampler {
	return &sampler{rt: rt, mem: mem, closeMem: closeMem, pages: pageMemory{mem: mem, pages: map[uint64][]byte{}},
		codes: map[uint64]*code{}, tstates: map[int]uint64{}}
}

// sampler reads one process's Python frames at its samples: the
// sampled thread's chain only, from its thread state (the list of them
// read again when a thread is missing from it), the code objects kept
// from sample to sample while their identifying fields stay the same.
type sampler struct {
	rt       *Runtime
	mem      target.Memory
	closeMem func()
	pages    pageMemory
	codes    map[uint64]*code
	tstates  map[int]uint64
	listed   time.Time // when tstates was read
}

func (s *sampler) Close() {
	if s.closeMem != nil {
		s.closeMem()
	}
}

func (s *sampler) Sample(tid int) (target.InterpStack, runtimes.SampleRead) {
	ts, ok := s.tstate(tid)
	if !ok {
		return target.InterpStack{}, runtimes.SampleNone
	}
	var th Thread
	how := runtimes.SampleNone
	for try := 0; try < sampleTries; try++ {
		var moved bool
		var err error
		th, moved, err = s.read(ts, tid)
		if err != nil {
			// The thread state is gone, or another thread's now.
			delete(s.tstates, tid)
			return target.InterpStack{}, runtimes.SampleNone
		}
		switch {
		case !moved && th.End == "":
			how = runtimes.SampleWhole
		case !moved:
			how = runtimes.SampleCut
		default:
			how = runtimes.SampleTorn
			continue
		}
		break
	}
	if len(th.Frames) == 0 && how != runtimes.SampleTorn {
		return target.InterpStack{}, runtimes.SampleNone
	}
	return target.InterpStack{Entry: EvalFunction, Frames: interpFrames(th.Frames)}, how
}

// read walks the chain of thread state ts, which must be thread tid's;
// moved reports that its current frame was another after the walk than
// before it (the chain read may mix two instants).
func (s *sampler) read(ts uint64, tid int) (th Thread, moved bool, err error) {
	s.pages.reset()
	w := newWalker(&s.rt.l, &s.pages)
	w.known, w.budget, w.deadline = s.codes, sampleBudget, time.Now().Add(sampleWalkTime)
	th.TID = tid
	got, err := w.ptr(ts + s.rt.l.tsNativeTID)
	if err != nil || int(int32(got)) != tid {
		return th, false, fmt.Errorf("thread state at %#x is not thread %d's", ts, tid)
	}
	first, err := currentFrame(&w, ts)
	if err != nil {
		return th, false, err
	}
	w.frames(&th, first)
	if len(th.Frames) > maxSampleFrames {
		th.Frames = th.Frames[:maxSampleFrames]
	}
	// Again, from the process itself (not the pages kept): the frame
	// the thread runs now.
	direct := newWalker(&s.rt.l, s.mem)
	now, err := currentFrame(&direct, ts)
	if len(s.codes) > maxCodes {
		clear(s.codes)
	}
	for addr, c := range w.codes {
		if c.err == nil {
			s.codes[addr] = c
		}
	}
	return th, err != nil || now != first, nil
}

// currentFrame reads the frame thread state ts runs.
func currentFrame(w *walker, ts uint64) (uint64, error) {
	l := w.l
	frame, err := w.ptr(ts + l.tsFrame)
	if err == nil && l.viaCFrame && frame != 0 {
		frame, err = w.ptr(frame + l.cframeCurrent)
	}
	return frame, err
}

// tstate returns thread tid's thread state, reading the list again (at
// most every tstateRefresh, while it is not empty) when it is not known.
func (s *sampler) tstate(tid int) (uint64, bool) {
	if ts, ok := s.tstates[tid]; ok {
		return ts, true
	}
	if len(s.tstates) > 0 && time.Since(s.listed) < tstateRefresh {
		// (A thread that runs no Python code: the list is not read
		// at each of its samples. An empty list, an interpreter
		// starting, is read again at once.)
		return 0, false
	}
	s.listed = time.Now()
	m, err := s.rt.ThreadStates(s.mem)
	if err != nil && len(m) == 0 {
		return 0, false
	}
	s.tstates = m
	ts, ok := m[tid]
	return ts, ok
}

// interpFrames are a chain's frames as a target's.
func interpFrames(fs []Frame) []target.InterpFrame {
	out := make([]target.InterpFrame, 0, len(fs))
	for _, f := range fs {
		name := f.Function
		if name == "" {
			name = InvalidName
		}
		out = append(out, target.InterpFrame{Function: name, File: f.File, Line: max(f.Line, 0),
			Method: "python", ParenLocation: true, Activation: f.Activation, Anchor: f.Anchor})
	}
	return out
}

// pageMemory reads a process a page at a time and keeps the pages for
// one sample's walk: a chain's frames share their data stack chunk's
// pages, so that a walk costs a few reads, and what it reads of a page
// is of one instant. Past maxSamplePages, pieces are read as asked.
type pageMemory struct {
	mem   target.Memory
	pages map[uint64][]byte // nil: unreadable as a whole
	free  [][]byte
}

// reset forgets the pages (a new sample), keeping their buffers.
func (m *pageMemory) reset() {
	for _, pg := range m.pages {
		if pg != nil {
			m.free = append(m.free, pg)
		}
	}
	clear(m.pages)
}

func (m *pageMemory) ReadMemory(addr uint64, p []byte) error {
	if addr+uint64(len(p)) < addr {
		return m.mem.ReadMemory(addr, p)
	}
	for done := 0; done < len(p); {
		a := addr + uint64(done)
		base := a &^ (pageSize - 1)
		pg, ok := m.pages[base]
		if !ok {
			if len(m.pages) >= maxSamplePages {
				return m.mem.ReadMemory(addr, p)
			}
			if n := len(m.free); n > 0 {
				pg, m.free = m.free[n-1], m.free[:n-1]
			} else {
				pg = make([]byte, pageSize)
			}
			if m.mem.ReadMemory(base, pg) != nil {
				m.free = append(m.free, pg)
				pg = nil
			}
			m.pages[base] = pg
		}
		if pg == nil {
			// Part of the page is unmapped: the piece is read as asked.
			return m.mem.ReadMemory(addr, p)
		}
		done += copy(p[done:], pg[a-base:])
	}
	return nil
}
