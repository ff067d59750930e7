package runtimes

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/rewindstack/rewind/internal/procmaps"
	"github.com/rewindstack/rewind/target"
)

// Sampler is a runtime whose frames a recording unwound in user space
// reads from the sampled process itself, as each sample is read (the
// ring buffer's wake-up, a fraction of a millisecond after the sample):
// the stack copy the kernel takes holds the native stack only, and the
// interpreter's frames live elsewhere in its memory. The read comes
// after the sample, while the thread runs on: Sampling counts how late
// and how often the frames changed under the read.
type Sampler interface {
	Runtime
	// SampleProcess finds the runtime in process pid, whose mappings are
	// maps, for reads at sample time: nil when the process does not run
	// it; the error, when not nil, says in one line why its frames will
	// be missing.
	SampleProcess(pid int, maps []target.Mapping) (SampleProcess, error)
}

// SampleProcess is a Sampler's reader of one process.
type SampleProcess interface {
	// Sample reads thread tid's frames now, and says how the read went;
	// the stack's frames are innermost first, as a dump's are.
	Sample(tid int) (target.InterpStack, SampleRead)
	// Close releases the process's memory.
	Close()
}

// SampleRead is how one read of a thread's frames went.
type SampleRead uint8

const (
	// SampleWhole: the chain was read to its end, and the thread's
	// current frame was the same after the read as before it.
	SampleWhole SampleRead = iota
	// SampleNone: the thread runs none of the runtime's frames (no
	// thread state, or an empty chain).
	SampleNone
	// SampleTorn: the chain changed under every read tried (the current
	// frame moved, or the chain broke off); the frames are the last
	// read's.
	SampleTorn
	// SampleCut: the chain could not be read to its end (unreadable
	// memory, not a frame) though it did not change.
	SampleCut
)

// SampleStats says how a recording read one runtime's frames.
type SampleStats struct {
	// Runtime is the runtime's name.
	Runtime string
	// Samples counts the samples of the processes that run it; Whole,
	// None, Torn and Cut count them by how their read went.
	Samples, Whole, None, Torn, Cut int
	// Late counts the samples read more than LateAfter after they were
	// taken (the thread may have run on as long as between two samples).
	Late      int
	LateAfter time.Duration
	// MedianDelay and MaxDelay are the time from the sample to the read.
	MedianDelay, MaxDelay time.Duration
}

// Sampling reads the frames of every registered Sampler runtime for the
// samples of a recording, process by process (profiles.Collector.Interp):
// each process is looked for once (and again after an exec, or a second
// after a look that found no runtime), and read at each of its samples.
type Sampling struct {
	// Now is the samples' clock, in nanoseconds (the recording stamps
	// its samples with it: perfevent.Options.Prompt).
	Now func() uint64
	// LateAfter is the delay past which a read counts as late.
	LateAfter time.Duration
	// Warn receives, once per process and runtime, why frames will be
	// missing (nil: nothing is said).
	Warn func(string)

	procs  map[int]*sampled
	stats  map[string]*SampleStats
	delays map[string][]uint32 // microseconds, a bounded reservoir
	seen   map[string]int      // delays seen per runtime
	active bool                // a process was found running one
}

// sampled is one process's readers.
type sampled struct {
	readers []SampleProcess
	names   []string
	looked  time.Time // when nothing was found: look again a second later
	warned  bool      // a look's error was said: the next ones are not
}

// Bounds on what a recording keeps: processes (the readers of the
// others are closed and found again), delays kept for the median.
const (
	maxSampled = 1024
	maxDelays  = 1 << 16
)

// SampleInterp reads thread tid of process pid, sampled at time t (Now's
// clock), for each runtime the process runs.
func (s *Sampling) SampleInterp(pid, tid int, t uint64) []target.InterpStack {
	if pid <= 0 || tid <= 0 {
		return nil
	}
	p := s.process(pid)
	if len(p.readers) == 0 {
		return nil
	}
	var out []target.InterpStack
	for i, r := range p.readers {
		st, how := r.Sample(tid)
		var now uint64
		if s.Now != nil {
			now = s.Now()
		}
		s.count(p.names[i], how, now, t)
		if len(st.Frames) > 0 {
			out = append(out, st)
		}
	}
	return out
}

// process returns pid's readers, looking for them when needed.
func (s *Sampling) process(pid int) *sampled {
	p := s.procs[pid]
	if p != nil && (len(p.readers) > 0 || time.Since(p.looked) < time.Second) {
		return p
	}
	if p == nil {
		if len(s.procs) >= maxSampled {
			s.closeAll()
		}
		if s.procs == nil {
			s.procs = map[int]*sampled{}
		}
		p = &sampled{}
		s.procs[pid] = p
	}
	p.looked = time.Now()
	maps, err := procmaps.Read(pid)
	if err != nil {
		return p
	}
	for _, rt := range All() {
		sm, ok := rt.(Sampler)
		if !ok {
			continue
		}
		r, err := sm.SampleProcess(pid, maps)
		if err != nil && s.Warn != nil && !p.warned {
			p.warned = true
			s.Warn(err.Error())
		}
		if r != nil {
			s.active = true
			p.readers = append(p.readers, r)
			p.names = append(p.names, rt.Name())
		}
	}
	return p
}

// count adds one read to the runtime's stats.
func (s *Sampling) count(name string, how SampleRead, now, t uint64) {
	if s.stats == nil {
		s.stats, s.delays, s.seen = map[string]*SampleStats{}, map[string][]uint32{}, map[string]int{}
	}
	st := s.stats[name]
	if st == nil {
		st = &SampleStats{Runtime: name, LateAfter: s.LateAfter}
		s.stats[name] = st
	}
	st.Samples++
	switch how {
	case SampleWhole:
		st.Whole++
	case SampleNone:
		st.None++
	case SampleTorn:
		st.Torn++
	default:
		st.Cut++
	}
	if now == 0 || t == 0 || now < t {
		return
	}
	d := time.Duration(now - t)
	st.MaxDelay = max(st.MaxDelay, d)
	if s.LateAfter > 0 && d > s.LateAfter {
		st.Late++
	}
	us := uint32(min(d/time.Microsecond, 1<<32-1))
	s.seen[name]++
	if ds := s.delays[name]; len(ds) < maxDelays {
		s.delays[name] = append(ds, us)
	} else if i := rand.IntN(s.seen[name]); i < maxDelays {
		ds[i] = us // (reservoir sampling: every delay as likely kept)
	}
}

// Idle reports that no process sampled so far runs a Sampler runtime:
// nothing needs the samples read as soon as they are taken.
func (s *Sampling) Idle() bool { return !s.active }

// Exec says that process pid ran a new program: its readers are
// dropped, and it is looked for again at its next sample.
func (s *Sampling) Exec(pid int) {
	if p := s.procs[pid]; p != nil {
		for _, r := range p.readers {
			r.Close()
		}
		delete(s.procs, pid)
	}
}

// Stats returns how the reads went, per runtime, by name.
func (s *Sampling) Stats() []SampleStats {
	var out []SampleStats
	for name, st := range s.stats {
		c := *st
		if ds := slices.Clone(s.delays[name]); len(ds) > 0 {
			slices.Sort(ds)
			c.MedianDelay = time.Duration(ds[len(ds)/2]) * time.Microsecond
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b SampleStats) int {
		if a.Runtime < b.Runtime {
			return -1
		}
		if a.Runtime > b.Runtime {
			return 1
		}
		return 0
	})
	return out
}

// Close closes every process's readers.
func (s *Sampling) Close() { s.closeAll() }

func (s *Sampling) closeAll() {
	for _, p := range s.procs {
		for _, r := range p.readers {
			r.Close()
		}
	}
	clear(s.procs)
}
