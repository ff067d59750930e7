package cpython

import (
	"bytes"
	"cmp"
	"errors"
	"slices"
	"sort"
	"strconv"
	"time"

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
	codes    map[uint64]*code // the code objects Prepare read
	prior    *Stacks
	priorErr error

	reads  []live.Read // the spans re-read in the pause
	stacks *Stacks
	err    error
	// Rewalked reports that the stacks changed between Prepare and the
	// pause, so During walked them again.
	Rewalked bool
	// Unchecked reports that the pause's bound (live.Reader.Deadline)
	// was reached before the stacks could be re-read or walked again in
	// it: Stacks gives those Prepare walked while the process ran.
	Unchecked bool
	// Spans and SpanBytes say how much the pause re-reads (set by
	// Prepare): the ranges read, merged.
	Spans     int
	SpanBytes int
	// InPause is how long During took: what reading the Python stacks
	// added to the pause.
	InPause time.Duration
}

// NewLive returns a Live reader of process pid, whose runtime is rt.
func NewLive(pid int, rt *Runtime) *Live { return &Live{rt: rt, pid: pid} }

// Prepare walks the stacks before the pause, and sets up the buffers
// the pause's re-read fills: the ranges the walk read, merged into spans
// where they lie close together (a thread's frames share its data stack
// chunk), so that the pause costs a few iovecs.
func (l *Live) Prepare() {
	l.rec = recorder{mem: live.NewReader(l.pid), pages: map[uint64][]byte{}}
	l.prior, l.codes, l.priorErr = l.rt.read(&l.rec, nil)
	l.rec.pages = nil
	rs := l.rec.reads
	slices.SortFunc(rs, func(a, b recorded) int { return cmp.Compare(a.addr, b.addr) })
	l.reads = l.reads[:0]
	var lo, hi uint64
	flush := func() {
		if hi > lo {
			b := make([]byte, hi-lo)
			for i := 0; i < len(b); i += pageSize {
				b[i] = 1 // faulted in now, not in the pause
			}
			l.reads = append(l.reads, live.Read{Addr: lo, Buf: b})
		}
	}
	for i := range rs {
		r := &rs[i]
		end := r.addr + uint64(len(r.data))
		if hi == 0 || r.addr > hi+spanGap || end-lo > maxSpan {
			flush()
			lo, hi = r.addr, end
		} else {
			hi = max(hi, end)
		}
		r.span = len(l.reads)
	}
	flush()
	l.Spans = len(l.reads)
	for _, rd := range l.reads {
		l.SpanBytes += len(rd.Buf)
	}
}

// spanGap is the most unwanted bytes read between two ranges of one
// span; maxSpan bounds a span.
const (
	spanGap = 1 << 10
	maxSpan = 1 << 20
)

// During re-reads, in the pause, what Prepare read; see live.Options.During.
// It holds to the pause's bound (live.Reader.Deadline): when the re-read
// or a walk again would run past it, the stacks Prepare walked are kept,
// with a note that they were not re-checked (Unchecked), and the threads
// resume.
func (l *Live) During(r *live.Reader) {
	start := time.Now()
	defer func() { l.InPause = time.Since(start) }()
	// During runs again when a thread left asleep ran meanwhile: only
	// the last call's outcome counts.
	l.Unchecked = false
	if !readBounded(r, l.reads) {
		l.keepPrior()
		return
	}
	same := l.priorErr == nil
	if same {
		for _, th := range l.prior.Threads {
			// A read that failed is not in the re-read: walk again.
			same = same && th.End == ""
		}
	}
	for i := range l.rec.reads {
		if !same {
			break
		}
		rc := &l.rec.reads[i]
		sp := &l.reads[rc.span]
		off := int(rc.addr - sp.Addr)
		same = off+len(rc.data) <= sp.N && bytes.Equal(sp.Buf[off:off+len(rc.data)], rc.data)
	}
	if same {
		l.stacks, l.err = l.prior, nil
		return
	}
	l.Rewalked = true
	pm := &pauseMem{next: r, spans: l.reads, bound: r}
	// The code objects Prepare read are taken again when their
	// identifying fields are the same: a dump reads each table once.
	l.stacks, _, l.err = l.rt.read(pm, l.codes)
	if pm.expired {
		l.keepPrior()
	}
}

// readBounded reads reads in batches of at most batchBytes, and reports
// false when r's deadline passed before the last batch was asked for.
func readBounded(r *live.Reader, reads []live.Read) bool {
	for i := 0; i < len(reads); {
		if r.Expired() {
			return false
		}
		j, n := i, 0
		for j < len(reads) && (j == i || n+len(reads[j].Buf) <= batchBytes) {
			n += len(reads[j].Buf)
			j++
		}
		r.ReadBatch(reads[i:j])
		i = j
	}
	return true
}

// batchBytes is how much one batch of the pause's re-read asks for: the
// deadline is checked between batches (process_vm_readv copies about a
// gigabyte a second here, so a batch is about a millisecond).
const batchBytes = 1 << 20

// keepPrior keeps what Prepare walked as the stacks; Stacks notes that
// the pause ended before they could be re-checked.
func (l *Live) keepPrior() {
	l.stacks, l.err, l.Unchecked = nil, nil, true
}

// uncheckedNote is the note of stacks kept from before the pause.
const uncheckedNote = "the Python stacks were read just before the pause and not re-checked in it: re-reading them would have held the threads stopped past the pause's bound (--max-pause)"

// errPauseBound fails the reads of a walk in the pause past its bound.
var errPauseBound = errors.New("the pause's bound was reached")

// Stacks returns the stacks as they were in the pause (as Prepare found
// them when During did not run: a capture that failed).
func (l *Live) Stacks() (*Stacks, error) {
	if l.Unchecked && l.prior != nil {
		s := *l.prior
		s.Notes = append(slices.Clip(s.Notes), uncheckedNote)
		return &s, l.priorErr
	}
	if l.stacks == nil && l.err == nil {
		return l.prior, l.priorErr
	}
	return l.stacks, l.err
}

// recorder is a Memory that keeps a copy of every read that succeeded.
// It reads the process a page at a time, and keeps the pages: a walk
// reads many small pieces of the same pages.
type recorder struct {
	mem   target.Memory
	reads []recorded
	pages map[uint64][]byte // nil: unreadable as a whole
	slab  []byte            // the copies, one after another
}

type recorded struct {
	addr uint64
	data []byte // in slab
	span int    // index of the span of the pause's re-read that holds it
}

const pageSize = 4096

func (r *recorder) ReadMemory(addr uint64, p []byte) error {
	if err := r.read(addr, p); err != nil {
		return err
	}
	if cap(r.slab)-len(r.slab) < len(p) {
		r.slab = make([]byte, 0, max(64<<10, len(p)))
	}
	n := len(r.slab)
	r.slab = append(r.slab, p...)
	r.reads = append(r.reads, recorded{addr: addr, data: r.slab[n:len(r.slab):len(r.slab)]})
	return nil
}

func (r *recorder) read(addr uint64, p []byte) error {
	if addr+uint64(len(p)) < addr {
		return r.mem.ReadMemory(addr, p)
	}
	for done := 0; done < len(p); {
		a := addr + uint64(done)
		pg, ok := r.pages[a&^(pageSize-1)]
		if !ok {
			pg = make([]byte, pageSize)
			if r.mem.ReadMemory(a&^(pageSize-1), pg) != nil {
				pg = nil
			}
			r.pages[a&^(pageSize-1)] = pg
		}
		if pg == nil {
			// Part of the page is unmapped: the piece is read as asked.
			return r.mem.ReadMemory(addr, p)
		}
		done += copy(p[done:], pg[a&(pageSize-1):])
	}
	return nil
}

// pauseMem serves reads from the spans re-read in the pause, and the
// rest from the stopped process.
type pauseMem struct {
	next  target.Memory
	spans []live.Read // sorted by address
	// bound, when set, fails every read past its deadline (expired is
	// then set): a walk again in the pause ends there.
	bound   *live.Reader
	expired bool
	reads   int
}

func (m *pauseMem) ReadMemory(addr uint64, p []byte) error {
	if m.bound != nil {
		// The clock is read every 64 reads: a read from the spans takes
		// nanoseconds.
		if m.reads++; m.expired || m.reads%64 == 0 && m.bound.Expired() {
			m.expired = true
			return errPauseBound
		}
	}
	i := sort.Search(len(m.spans), func(i int) bool { return m.spans[i].Addr > addr }) - 1
	if i >= 0 {
		sp := &m.spans[i]
		if off := addr - sp.Addr; off+uint64(len(p)) <= uint64(sp.N) {
			copy(p, sp.Buf[off:])
			return nil
		}
	}
	return m.next.ReadMemory(addr, p)
}

// Attach gives each thread context of t that a Python thread state runs
// on (matched by native thread id) its Python frames, spliced by the
// outputs above the _PyEval_EvalFrameDefault frame of their activation.
// A chain cut short, and each of the walk's notes (Stacks.Notes), is
// said through warn; a frame whose name is not one shows InvalidName.
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
		c.SetInterp(target.InterpStack{Entry: EvalFunction, Frames: interpFrames(th.Frames)})
		if th.End != "" && warn != nil {
			warn("thread " + strconv.Itoa(th.TID) + ": Python frame chain cut (" + th.End + "): " + th.Detail)
		}
	}
	if warn != nil {
		for _, n := range s.Notes {
			warn("Python stacks: " + n)
		}
	}
}

// EvalFunction is the native function each of whose activations runs a
// thread's Python frames.
const EvalFunction = "_PyEval_EvalFrameDefault"
