package session

import (
	"time"

	"github.com/rewindstack/rewind/perfdata"
	"github.com/rewindstack/rewind/profiles"
)

// Source is a live recording's record stream: a *perfevent.Recorder.
type Source interface {
	// Wait blocks until records are ready or timeout passed; it returns
	// true when an event hung up (its task exited).
	Wait(timeout time.Duration) bool
	// Read hands every buffered record to fn.
	Read(fn func(*perfdata.Record) error) error
	// Disable stops the events; buffered records stay readable.
	Disable()
}

// Pump is the recording loop every live recording uses (rewind record,
// rewind agent, the tests): it waits for the source's buffers, reads every
// record into the collector (or Add), unwinds long recordings as they go,
// and asks Check after every read whether to stop. Everything runs on the
// calling goroutine, so Check may take samples from the collector.
type Pump struct {
	// Source is read until Check returns a reason.
	Source Source
	// Collector receives every record unless Add is set.
	Collector *profiles.Collector
	// Add, when set, receives every record instead of Collector. The
	// record is valid only during the call.
	Add func(*perfdata.Record)
	// Builder, when set with Collector, unwinds the samples older than
	// Lag whenever the pending stack copies exceed PendingLimit bytes, so
	// that a long recording does not keep every copy.
	Builder      *profiles.Builder
	PendingLimit int
	// Lag is how old a record must be (perf clock) before no record of
	// another CPU can sort before it (default 2 s: every buffer is read at
	// least every Interval).
	Lag time.Duration
	// Interval is the longest wait between two reads (default 100 ms).
	Interval time.Duration
	// Check is called after every read with whether an event hung up
	// since the last call; a non-empty result ends the loop and is Run's
	// result. Nil: run until an event hangs up.
	Check func(hup bool) string
	// Warn receives the read error, once (may be nil).
	Warn func(string)
	// Idle, when set, is asked before each wait: while it says true, the
	// loop does not wait to be woken (a source that wakes it at every
	// sample, perfevent.Options.Prompt, for readers that then need the
	// samples at once) but reads every IdleInterval, so that a recording
	// without such readers costs no wake-up per sample.
	Idle func() bool

	err error
}

// Err returns the first read error; reading stops after it, and the
// collector holds what was read before.
func (p *Pump) Err() error { return p.err }

// Read reads what the source has buffered now.
func (p *Pump) Read() {
	if p.err != nil {
		return
	}
	add := p.Add
	if add == nil {
		add = p.Collector.Add
	}
	p.err = p.Source.Read(func(r *perfdata.Record) error { add(r); return nil })
	if p.err != nil && p.Warn != nil {
		p.Warn("reading samples: " + p.err.Error() + " (the profile holds what was read before)")
	}
	if p.Builder != nil && p.Collector != nil && p.Collector.PendingBytes() > p.PendingLimit {
		if lag := uint64(p.lag()); p.Collector.LastTime() > lag {
			p.Builder.Add(p.Collector.Take(p.Collector.LastTime() - lag))
		}
	}
}

// IdleInterval is how often an idle loop (Pump.Idle) reads: short
// enough that no buffer fills between two reads at the sampling rates a
// user asks for.
const IdleInterval = 10 * time.Millisecond

func (p *Pump) lag() time.Duration {
	if p.Lag > 0 {
		return p.Lag
	}
	return 2 * time.Second
}

// Run reads until Check returns a reason, then disables the source, reads
// what is left and returns the reason.
func (p *Pump) Run() string {
	interval := p.Interval
	if interval <= 0 {
		interval = 100 * time.Millisecond
	}
	why := ""
	for why == "" {
		var hup bool
		if p.Idle != nil && p.Idle() {
			time.Sleep(min(interval, IdleInterval))
			hup = p.Source.Wait(0)
		} else {
			hup = p.Source.Wait(interval)
		}
		p.Read()
		if p.Check != nil {
			why = p.Check(hup)
		} else if hup {
			why = "event hung up"
		}
	}
	p.Source.Disable()
	p.Read()
	return why
}
