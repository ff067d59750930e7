package ruby

import (
	"time"

	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/runtimes"
	"github.com/rewindstack/rewind/target"
)

// Bounds on a sample's read (a user-mode recording reads the sampled
// thread's control frames as it reads each sample).
const (
	sampleWalkTime = 100 * time.Millisecond
	threadsRefresh = 100 * time.Millisecond // the fewest between two reads of the thread list
	sampleTries    = 3
)

func (registered) SampleProcess(pid int, maps []target.Mapping) (runtimes.SampleProcess, error) {
	rt, err := Find(maps, runtimes.ProcessFile(pid))
	if rt == nil {
		return nil, note(err)
	}
	mem := live.NewProcMemory(pid)
	return &sampler{rt: rt, mem: mem, c: newCache(), threads: map[int]uint64{}}, nil
}

// sampler reads one process's Ruby frames at its samples: the sampled
// thread's control frames only, from its rb_thread_t (the thread list
// read again when a thread is missing from it), what is read of iseqs
// kept from sample to sample.
type sampler struct {
	rt      *Runtime
	mem     *live.ProcMemory
	c       *cache
	threads map[int]uint64 // tid -> rb_thread_t
	listed  time.Time
}

func (s *sampler) Close() { s.mem.Close() }

func (s *sampler) Sample(tid int) (target.InterpStack, runtimes.SampleRead) {
	th, ok := s.thread(tid)
	if !ok {
		return target.InterpStack{}, runtimes.SampleNone
	}
	if len(s.c.iseqs) > maxKernelIseqs {
		s.c = newCache()
	}
	var t Thread
	how := runtimes.SampleNone
	for try := 0; try < sampleTries; try++ {
		before, ok1 := s.cfp(th)
		t = s.rt.walker(s.mem, s.c, sampleWalkTime).thread(th)
		after, ok2 := s.cfp(th)
		if !ok1 || !ok2 || (t.TID != 0 && t.TID != tid) {
			delete(s.threads, tid) // gone, or another thread's now
			return target.InterpStack{}, runtimes.SampleNone
		}
		switch {
		case before != after:
			how = runtimes.SampleTorn
			continue
		case t.End == "":
			how = runtimes.SampleWhole
		default:
			how = runtimes.SampleCut
		}
		break
	}
	if len(t.Frames) == 0 && how != runtimes.SampleTorn {
		return target.InterpStack{}, runtimes.SampleNone
	}
	st := Stack(t.Frames)
	st.EntryPCs = []target.PCRange{s.rt.Exec}
	return st, how
}

// cfp reads the control frame thread th runs now (its execution
// context's cfp, read from the process itself).
func (s *sampler) cfp(th uint64) (uint64, bool) {
	w := s.rt.walker(s.mem, s.c, sampleWalkTime)
	ec, err := w.ptr(th + s.rt.l.thEC)
	if err != nil || ec == 0 {
		return 0, false
	}
	cfp, err := w.ptr(ec + s.rt.l.ecCFP)
	return cfp, err == nil
}

// thread returns thread tid's rb_thread_t, reading the list again (at
// most every threadsRefresh while it is not empty) when it is not known.
func (s *sampler) thread(tid int) (uint64, bool) {
	if th, ok := s.threads[tid]; ok {
		return th, true
	}
	if len(s.threads) > 0 && time.Since(s.listed) < threadsRefresh {
		return 0, false
	}
	s.listed = time.Now()
	st, _, _ := s.rt.read(s.mem, newCache(), readOpts{})
	if st == nil {
		return 0, false
	}
	clear(s.threads)
	for _, t := range st.Threads {
		if t.TID > 0 {
			s.threads[t.TID] = t.Addr
		}
	}
	th, ok := s.threads[tid]
	return th, ok
}

// walker returns a walk of rt's memory mem with cache c, bounded to d.
func (rt *Runtime) walker(mem target.Memory, c *cache, d time.Duration) *walker {
	return &walker{rt: rt, l: rt.l, mem: mem, c: c, pages: map[uint64][]byte{}, deadline: time.Now().Add(d)}
}
