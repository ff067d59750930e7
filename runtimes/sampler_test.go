package runtimes_test

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/rewindstack/rewind/runtimes"
	"github.com/rewindstack/rewind/target"
)

// toySampler is a runtime read at sample time, written in a test file:
// it finds itself in this test's own process and answers each sample
// with the next of reads.
type toySampler struct {
	toy
	reads  []runtimes.SampleRead
	opened *int
	closed *int
	err    error
}

func (r toySampler) SampleProcess(pid int, maps []target.Mapping) (runtimes.SampleProcess, error) {
	if pid != os.Getpid() || len(maps) == 0 {
		return nil, nil
	}
	if r.err != nil {
		return nil, r.err
	}
	*r.opened++
	return &toyProc{r: &r}, nil
}

type toyProc struct {
	r *toySampler
	n int
}

func (p *toyProc) Sample(tid int) (target.InterpStack, runtimes.SampleRead) {
	how := p.r.reads[p.n%len(p.r.reads)]
	p.n++
	if how == runtimes.SampleNone {
		return target.InterpStack{}, how
	}
	return target.InterpStack{Entry: "main", Frames: []target.InterpFrame{{Function: "script_main", Method: "toy"}}}, how
}

func (p *toyProc) Close() { *p.r.closed++ }

// TestSampling: each sample of a process that runs a Sampler runtime is
// read, counted by how the read went and how late it came after the
// sample; a process is looked for once, and again after an exec; a look
// that fails is said once; the sampling is idle until a process runs a
// Sampler runtime.
func TestSampling(t *testing.T) {
	var opened, closed int
	reads := []runtimes.SampleRead{runtimes.SampleWhole, runtimes.SampleWhole, runtimes.SampleTorn, runtimes.SampleNone, runtimes.SampleCut}
	runtimes.Register(toySampler{toy: toy{}, reads: reads, opened: &opened, closed: &closed})
	defer runtimes.Unregister("toy")
	now := uint64(10_000_000)
	s := &runtimes.Sampling{Now: func() uint64 { return now }, LateAfter: time.Millisecond}
	pid := os.Getpid()
	if !s.Idle() {
		t.Error("idle before any sample: Idle is false")
	}
	withFrames := 0
	for i := range 10 {
		// Every other read comes 2 ms after its sample: late.
		at := now - 100_000
		if i%2 == 1 {
			at = now - 2_000_000
		}
		if st := s.SampleInterp(pid, pid, at); len(st) == 1 && st[0].Frames[0].Function == "script_main" {
			withFrames++
		}
	}
	if opened != 1 {
		t.Errorf("the process was looked for %d times, want 1", opened)
	}
	if s.Idle() {
		t.Error("a process runs the toy runtime: Idle is true")
	}
	if withFrames != 8 {
		t.Errorf("%d samples with frames, want 8 (all but the none reads)", withFrames)
	}
	var st runtimes.SampleStats
	for _, x := range s.Stats() {
		if x.Runtime == "toy" {
			st = x
		}
	}
	want := runtimes.SampleStats{Runtime: "toy", Samples: 10, Whole: 4, None: 2, Torn: 2, Cut: 2, Late: 5, LateAfter: time.Millisecond,
		MedianDelay: 2 * time.Millisecond, MaxDelay: 2 * time.Millisecond}
	if st != want {
		t.Errorf("stats %+v,\nwant  %+v", st, want)
	}
	s.Exec(pid)
	if closed != 1 {
		t.Errorf("exec: %d readers closed, want 1", closed)
	}
	s.SampleInterp(pid, pid, now)
	if opened != 2 {
		t.Errorf("after the exec the process was looked for %d times in all, want 2", opened)
	}
	s.Close()
	if closed != 2 {
		t.Errorf("Close: %d readers closed in all, want 2", closed)
	}
	if s.SampleInterp(0, 0, now) != nil || s.SampleInterp(1<<30, 1<<30, now) != nil {
		t.Error("frames for no process")
	}

	runtimes.Unregister("toy")
	runtimes.Register(toySampler{reads: reads, opened: &opened, closed: &closed, err: errors.New("toy frames: unreadable")})
	var warned []string
	s = &runtimes.Sampling{Warn: func(m string) { warned = append(warned, m) }}
	for range 3 {
		s.SampleInterp(pid, pid, now)
	}
	if len(warned) != 1 || warned[0] != "toy frames: unreadable" {
		t.Errorf("warnings %q, want the look's error once", warned)
	}
}
