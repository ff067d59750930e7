package profiles

import (
	"github.com/rewindstack/rewind/perfdata"
	"github.com/rewindstack/rewind/perfevent"
)

// OffCPU turns the records of a sched_switch recording
// (perfevent.SwitchAttr) into off-CPU samples: the stack a thread had when
// it blocked, weighted by the nanoseconds until it ran again. Threads
// preempted while runnable are not blocked and are not counted.
type OffCPU struct {
	col     *Collector
	format  perfevent.SwitchFormat
	pending map[int]*Sample // tid -> switched-out sample, Period 0 until it runs again
	epoch   map[int]int     // tid -> lost when its pending sample switched out
	lost    int             // records the kernel reported lost so far
	unsure  int             // blocked intervals dropped: records were lost during them
	held    []*Sample       // taken from the collector (or continued) while their thread is still blocked
	keep    func(pid, tid int) bool
	bad     int
}

// NewOffCPU returns an OffCPU adding to col. keep, when not nil, chooses
// the threads whose blocking is recorded.
func NewOffCPU(col *Collector, f perfevent.SwitchFormat, keep func(pid, tid int) bool) *OffCPU {
	return &OffCPU{col: col, format: f, pending: map[int]*Sample{}, epoch: map[int]int{}, keep: keep}
}

// Unsure counts the blocked intervals left out because the kernel lost
// records while they lasted: the thread may have run and blocked again
// unseen, and its time off CPU is not known.
func (o *OffCPU) Unsure() int { return o.unsure }

// end finishes the pending sample of tid at time t, or drops it when
// records were lost since it began.
func (o *OffCPU) end(tid int, s *Sample, t uint64) {
	if o.epoch[tid] == o.lost {
		s.Period = max(1, t-min(t, s.Time))
	} else {
		o.unsure++ // Period stays 0: sort drops it
	}
	delete(o.pending, tid)
	delete(o.epoch, tid)
}

// Bad counts samples whose raw data was too short for the format.
func (o *OffCPU) Bad() int { return o.bad }

// Add handles one record of the sched_switch recording (a session.Pump's Add).
func (o *OffCPU) Add(r *perfdata.Record) {
	if r.Type != perfdata.RecordSample {
		if r.Type == perfdata.RecordExit && r.Task != nil {
			if s := o.pending[int(r.Task.TID)]; s != nil {
				// The thread exited while blocked: it was off CPU until
				// its exit.
				o.end(int(r.Task.TID), s, r.Task.Time)
			}
		}
		if r.Type == perfdata.RecordLost || r.Type == perfdata.RecordLostSamples {
			o.lost++
		}
		if r.Type != perfdata.RecordLost && r.Type != perfdata.RecordLostSamples {
			o.col.Add(r) // lost counts stay with the recorder
		}
		return
	}
	raw := r.Sample.RawData
	prev, state, next, ok := o.format.Read(raw)
	if !ok {
		o.bad++
		return
	}
	t := r.Sample.Time
	if s := o.pending[int(next)]; s != nil && next != 0 {
		o.end(int(next), s, t)
	}
	// Blocked is one of the states reported in the low byte (S D T t X
	// Z P I). 0 is TASK_RUNNING: a switch on the way back to user space;
	// TASK_REPORT_MAX (0x100, "R+") a task preempted in the kernel
	// (before Linux 4.14, TASK_STATE_MAX, above the low byte): runnable
	// both, not blocked.
	if state&0xff == 0 || prev == 0 || int64(r.Sample.TID) != prev || (o.keep != nil && !o.keep(int(r.Sample.PID), int(r.Sample.TID))) {
		return
	}
	if old := o.pending[int(prev)]; old != nil {
		// A switch-in not seen: a recording of one thread's events sees
		// only its switches out (its time running counts as blocked:
		// cheap, as a blocking thread runs little); system-wide, the
		// record was lost.
		o.end(int(prev), old, t)
	}
	s := o.col.AddSample(r)
	if s == nil {
		return
	}
	s.Period = 0
	o.pending[int(prev)] = s
	o.epoch[int(prev)] = o.lost
}

// Take returns the off-CPU samples older than before (the recording's
// clock) whose threads have run again, so that a long period is unwound
// piece by piece; samples of threads still blocked are held until they
// run or the period ends.
func (o *OffCPU) Take(before uint64) []*Sample {
	return o.sort(append(o.col.Take(before), o.takeHeld()...))
}

func (o *OffCPU) takeHeld() []*Sample {
	h := o.held
	o.held = nil
	return h
}

// sort keeps the finished samples of out and holds the pending ones.
func (o *OffCPU) sort(out []*Sample) []*Sample {
	keep := out[:0]
	for _, s := range out {
		switch {
		case s.Period > 0:
			keep = append(keep, s)
		case o.pending[s.TID] == s:
			o.held = append(o.held, s)
		}
	}
	return keep
}

// Flush ends a period at now (the recording's clock, perfevent.Now for
// perfevent.ClockID): threads still blocked get the time until now, and
// continue in the next period from now. It returns the period's off-CPU
// samples not returned by Take, taken from the collector.
func (o *OffCPU) Flush(now uint64) []*Sample {
	for tid, s := range o.pending {
		if o.epoch[tid] != o.lost {
			// Still blocked, or ran and blocked again unseen: not known.
			o.end(tid, s, now)
			continue
		}
		if s.Period == 0 {
			s.Period = max(1, now-min(now, s.Time))
		}
	}
	out := o.sort(append(o.col.Take(now+1), o.takeHeld()...))
	for tid, s := range o.pending {
		c := s.Continue(now)
		if c == nil {
			delete(o.pending, tid)
			delete(o.epoch, tid)
			continue
		}
		o.pending[tid] = c
		o.held = append(o.held, c)
	}
	return out
}
