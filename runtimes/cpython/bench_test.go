package cpython_test

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/procmaps"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/runtimes"
	"github.com/rewindstack/rewind/runtimes/cpython"
	"github.com/rewindstack/rewind/stacks"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// BenchmarkDump: park.py with 100 threads 50 Python frames deep (plus
// the main thread), dumped in interleaved pairs with and without its
// Python frames (each a whole dump: find, capture, unwind, symbolize,
// warm caches). Reports the medians: pause-us and dump-us with Python,
// native-pause-us and native-dump-us without, and ratio = dump-us /
// native-dump-us (the target: pause ≤ 2000 µs, ratio ≤ 2),
// during-us, how long re-reading the Python stacks took in the pause
// (beside the stack copy, on another thread), and thread-pause-us, the
// median time one thread was stopped (pause-us is the process's: from
// the first PTRACE_INTERRUPT to the return of the last PTRACE_DETACH).
// live's BenchmarkFloor measures the part of the pause a capture cannot
// avoid.
//
//	go test ./cpython/ -run XXX -bench Dump -benchtime 20x
func BenchmarkDump(b *testing.B) {
	exe := "/root/.pyenv/versions/3.12.1/bin/python3.12"
	if _, err := os.Stat(exe); err != nil {
		exe = "/usr/bin/python3.11"
	}
	if _, err := os.Stat(exe); err != nil {
		b.Skipf("no CPython 3.11+: %v", err)
	}
	proc, _ := startParkB(b, exe, "50", "96")
	objs := &target.Objects{}
	sym := &symbolize.Symbolizer{Inlines: true}
	u, err := unwind.ByName("auto")
	if err != nil {
		b.Fatal(err)
	}
	var spans, bytes int
	var inPause, threadPause []float64
	dump := func(py bool) (pause, whole time.Duration) {
		start := time.Now()
		var l *cpython.Live
		opt := live.Options{}
		if py {
			maps, err := procmaps.Read(proc.PID)
			if err != nil {
				b.Fatal(err)
			}
			rt, err := cpython.Find(maps, live.NewReader(proc.PID), runtimes.ProcessFile(proc.PID))
			if err != nil || rt == nil {
				b.Fatalf("Find: %v %v", rt, err)
			}
			l = cpython.NewLive(proc.PID, rt)
			l.Prepare()
			opt.During = l.During
		}
		snap, err := live.Capture(proc.PID, opt)
		if err != nil {
			b.Fatal(err)
		}
		tg := snap.Target(objs, nil)
		if l != nil {
			s, err := l.Stacks()
			if err != nil {
				b.Fatal(err)
			}
			cpython.Attach(tg, s, nil)
		}
		rep := stacks.Unwind(tg, stacks.Options{Unwinder: u}, sym)
		if len(rep.Threads) != 101 {
			b.Fatalf("%d threads", len(rep.Threads))
		}
		if l != nil && l.Rewalked {
			b.Logf("rewalked in the pause")
		}
		if l != nil {
			spans, bytes = l.Spans, l.SpanBytes
			inPause = append(inPause, us(l.InPause))
			for _, th := range snap.Threads {
				threadPause = append(threadPause, us(th.Stopped))
			}
		}
		return snap.Pause, time.Since(start)
	}
	dump(true)
	dump(false)
	var pp, pd, np, nd []float64
	b.ResetTimer()
	for range b.N {
		p, d := dump(true)
		pp, pd = append(pp, us(p)), append(pd, us(d))
		p, d = dump(false)
		np, nd = append(np, us(p)), append(nd, us(d))
	}
	b.StopTimer()
	b.ReportMetric(median(pp), "pause-us")
	b.ReportMetric(median(pd), "dump-us")
	b.ReportMetric(median(np), "native-pause-us")
	b.ReportMetric(median(nd), "native-dump-us")
	b.ReportMetric(median(pd)/median(nd), "ratio")
	b.ReportMetric(median(inPause), "during-us")
	b.ReportMetric(median(threadPause), "thread-pause-us")
	b.ReportMetric(float64(spans), "spans")
	b.ReportMetric(float64(bytes), "span-bytes")
}

func us(d time.Duration) float64 { return float64(d.Microseconds()) }

func median(v []float64) float64 {
	slices.Sort(v)
	return v[len(v)/2]
}
