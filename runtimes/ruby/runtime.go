package ruby

import (
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/runtimes"
	"github.com/rewindstack/rewind/target"
)

// The reader registers itself: commands find it in runtimes.All, and
// dump gets a --no-ruby flag.
func init() { runtimes.Register(registered{}) }

// registered is package ruby as a runtimes.Runtime.
type registered struct{}

func (registered) Name() string { return "ruby" }

func (registered) Usage() string { return "do not show the Ruby frames of a Ruby 3.0-3.4 process" }

// note prefixes err, if any, with what it is about.
func note(err error) error {
	if err == nil {
		return nil
	}
	return errors.New("Ruby frames: " + err.Error())
}

func warnErr(warn func(string), err error) {
	if err = note(err); err != nil && warn != nil {
		warn(err.Error())
	}
}

func (registered) Live(pid int, maps []target.Mapping) (runtimes.Live, error) {
	if maps == nil {
		return nil, nil
	}
	rt, err := Find(maps, runtimes.ProcessFile(pid))
	if rt == nil {
		return nil, note(err)
	}
	l := NewLive(pid, rt)
	l.Prepare()
	return l, nil
}

func (registered) Core(tg *target.Target, warn func(string)) {
	rt, err := Find(runtimes.Maps(tg.Space), runtimes.CoreFiles(tg.Space))
	if rt == nil {
		warnErr(warn, err)
		return
	}
	s, err := rt.Read(tg.Mem)
	if s != nil {
		Attach(tg, s, warn)
	}
	warnErr(warn, err)
}

// Live reads the Ruby stacks of a running process in the same pause as
// its threads: Prepare walks them while the process runs, filling the
// cache of what does not change (iseqs' labels, paths and lines, method
// names) and noting the pages it read; During re-reads those pages in
// the pause in a few batched reads and walks again over them (reading
// singly only what moved elsewhere).
type Live struct {
	rt  *Runtime
	pid int
	c   *cache

	prior, stacks *Stacks
	priorErr, err error
	reads         []live.Read // the pages Prepare read, re-read in the pause
	// Unchecked reports that the pause's bound was reached before the
	// walk in it ended: Attach gives the stacks Prepare read.
	Unchecked bool
	// Pages is how many pages the pause re-reads in batches.
	Pages int
	// InPause is how long During took.
	InPause time.Duration
}

// NewLive returns a Live reader of process pid, whose runtime is rt.
func NewLive(pid int, rt *Runtime) *Live { return &Live{rt: rt, pid: pid, c: newCache()} }

// Prepare walks the stacks before the pause, and sets up the buffers the
// pause's re-read fills (touched now, so that they do not fault then).
func (l *Live) Prepare() {
	var pages map[uint64][]byte
	mem := live.NewReader(l.pid)
	l.prior, pages, l.priorErr = l.rt.read(mem, l.c, readOpts{})
	// A second walk, the cache warm and over the pages just read, touches
	// only what the pause's walk will: the thread list, control frames,
	// iseq headers, method entries; not the iseq bodies, strings and line
	// tables the cache holds.
	touched := map[uint64]bool{}
	l.rt.read(mem, l.c, readOpts{pages: pages, touched: touched})
	addrs := make([]uint64, 0, len(touched))
	for a := range touched {
		if pages[a] != nil {
			addrs = append(addrs, a)
		}
	}
	slices.Sort(addrs)
	buf := make([]byte, len(addrs)*pageSize)
	for i := 0; i < len(buf); i += pageSize {
		buf[i] = 1
	}
	l.reads = make([]live.Read, len(addrs))
	for i, a := range addrs {
		l.reads[i] = live.Read{Addr: a, Buf: buf[i*pageSize : (i+1)*pageSize : (i+1)*pageSize]}
	}
	l.Pages = len(addrs)
}

// batchPages is how many pages one batch of the pause's re-read asks
// for: the pause's bound is checked between batches.
const batchPages = 256

// During walks the stacks again in the pause, through r (a
// live.Options.During hook), within the pause's bound.
func (l *Live) During(r *live.Reader) {
	start := time.Now()
	defer func() { l.InPause = time.Since(start) }()
	expired := false
	bound := func() bool { expired = expired || r.Expired(); return expired }
	pages := make(map[uint64][]byte, len(l.reads))
	for i := 0; i < len(l.reads) && !bound(); i += batchPages {
		batch := l.reads[i:min(i+batchPages, len(l.reads))]
		r.ReadBatch(batch)
		for _, rd := range batch {
			if rd.N == pageSize {
				pages[rd.Addr] = rd.Buf
			}
		}
	}
	if !expired {
		l.stacks, _, l.err = l.rt.read(r, l.c, readOpts{pages: pages, expired: bound})
	}
	l.Unchecked = expired
}

// uncheckedNote is the note of stacks kept from before the pause.
const uncheckedNote = "the Ruby stacks were read just before the pause and not re-read in it: that would have held the threads stopped past the pause's bound (--max-pause)"

// Stacks returns the stacks of the pause (Prepare's when During did not
// run or ran out of time).
func (l *Live) Stacks() (*Stacks, error) {
	if l.Unchecked || l.stacks == nil && l.err == nil {
		if l.Unchecked && l.prior != nil {
			s := *l.prior
			s.Notes = append(append([]string(nil), s.Notes...), uncheckedNote)
			return &s, l.priorErr
		}
		return l.prior, l.priorErr
	}
	return l.stacks, l.err
}

// Attach gives tg's contexts the frames read in the pause.
func (l *Live) Attach(tg *target.Target, warn func(string)) {
	s, err := l.Stacks()
	if s != nil {
		Attach(tg, s, warn)
	}
	warnErr(warn, err)
}

// Entry is the native function each of whose activations runs a
// thread's Ruby frames from one VM_FRAME_FLAG_FINISH frame to the next.
const Entry = "rb_vm_exec"

// Method names a Ruby frame's origin in outputs ("ruby").
const Method = "ruby"

// Attach gives each thread context of t that a Ruby thread runs on
// (matched by kernel thread id, else by pthread_t against the thread
// pointer) its Ruby frames, spliced above the rb_vm_exec frame of their
// activation. A thread with no Ruby frames is left as it is; a walk cut
// short, and each note, is said through warn.
func Attach(t *target.Target, s *Stacks, warn func(string)) {
	byTID, byTP := map[int]*Thread{}, map[uint64]*Thread{}
	for i := range s.Threads {
		th := &s.Threads[i]
		if th.TID > 0 {
			byTID[th.TID] = th
		}
		if th.Pthread != 0 {
			byTP[th.Pthread] = th
		}
	}
	for i := range t.Contexts {
		c := &t.Contexts[i]
		if c.Kind != target.KindThread {
			continue
		}
		th := byTID[c.TID]
		if th == nil && c.TP != 0 {
			th = byTP[c.TP]
		}
		if th == nil {
			continue
		}
		if th.End != "" && warn != nil {
			warn("thread " + strconv.Itoa(c.TID) + ": Ruby frames cut (" + th.End + "): " + th.Detail)
		}
		if len(th.Frames) == 0 {
			continue
		}
		st := Stack(th.Frames)
		if s.Exec.Hi != 0 {
			st.EntryPCs = []target.PCRange{s.Exec}
		}
		c.SetInterp(st)
	}
	if warn != nil {
		for _, n := range s.Notes {
			warn("Ruby stacks: " + n)
		}
	}
}

// Stack turns a thread's frames into the splicer's stack.
func Stack(fs []Frame) target.InterpStack {
	out := make([]target.InterpFrame, 0, len(fs))
	for _, f := range fs {
		name := f.Label
		if name == "" {
			name = InvalidName
		}
		out = append(out, target.InterpFrame{Function: name, File: f.Path, Line: f.Line, Method: Method,
			ParenLocation: true, Activation: f.Activation})
	}
	return target.InterpStack{Entry: Entry, Frames: out}
}
