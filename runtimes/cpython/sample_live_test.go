package cpython_test

import (
	"os"
	"testing"

	"github.com/rewindstack/rewind/internal/procmaps"
	"github.com/rewindstack/rewind/runtimes"
)

// TestSampleMatchesCurrentFrames: the reader of a recording in user
// space (runtimes.Sampler), asked for each thread of park.py at a
// sample, reads the frames sys._current_frames() said, whole (the
// threads are parked: nothing moves under the read), on each
// interpreter.
func TestSampleMatchesCurrentFrames(t *testing.T) {
	var sm runtimes.Sampler
	for _, r := range runtimes.All() {
		if s, ok := r.(runtimes.Sampler); ok && r.Name() == "python" {
			sm = s
		}
	}
	if sm == nil {
		t.Fatal("the python runtime is no runtimes.Sampler")
	}
	for _, p := range pythons(t) {
		t.Run(p.name, func(t *testing.T) {
			proc, want := startPark(t, p)
			maps, err := procmaps.Read(proc.PID)
			if err != nil {
				t.Fatal(err)
			}
			sp, err := sm.SampleProcess(proc.PID, maps)
			if err != nil || sp == nil {
				t.Fatalf("SampleProcess: %v, %v", sp, err)
			}
			defer sp.Close()
			for tid, wf := range want {
				st, how := sp.Sample(tid)
				if how != runtimes.SampleWhole {
					t.Errorf("thread %d: read %v, want whole", tid, how)
				}
				if len(st.Frames) != len(wf) {
					t.Errorf("thread %d: %d frames, want %d:\ngot  %v\nwant %v", tid, len(st.Frames), len(wf), st.Frames, wf)
					continue
				}
				for i, w := range wf {
					g := st.Frames[i]
					if g.Function != w.Function || g.File != w.File || g.Line != w.Line {
						t.Errorf("thread %d frame %d: got %s (%s:%d), want %s (%s:%d)", tid, i, g.Function, g.File, g.Line, w.Function, w.File, w.Line)
					}
				}
			}
		})
	}
}

// BenchmarkSample reads one parked thread's chain of park.py on Debian's
// 3.11 as a recording in user space does at each sample: what a sample
// costs the recorder.
func BenchmarkSample(b *testing.B) {
	const python = "/usr/bin/python3.11"
	if _, err := os.Stat(python); err != nil {
		b.Skipf("%s not installed", python)
	}
	proc, report := startParkB(b, python)
	var sm runtimes.Sampler
	for _, r := range runtimes.All() {
		if s, ok := r.(runtimes.Sampler); ok {
			sm = s
		}
	}
	maps, err := procmaps.Read(proc.PID)
	if err != nil {
		b.Fatal(err)
	}
	sp, err := sm.SampleProcess(proc.PID, maps)
	if err != nil || sp == nil {
		b.Fatalf("SampleProcess: %v, %v", sp, err)
	}
	defer sp.Close()
	threads := want(b, report)
	tid, frames := 0, 0
	for t, fs := range threads {
		if len(fs) > frames {
			tid, frames = t, len(fs)
		}
	}
	for b.Loop() {
		if st, how := sp.Sample(tid); how != runtimes.SampleWhole || len(st.Frames) != frames {
			b.Fatalf("read %v, %d frames, want whole, %d", how, len(st.Frames), frames)
		}
	}
	b.ReportMetric(float64(frames), "frames")
}
