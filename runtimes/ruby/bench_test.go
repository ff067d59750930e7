package ruby_test

import (
	"slices"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/procmaps"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/runtimes"
	"github.com/rewindstack/rewind/runtimes/ruby"
	"github.com/rewindstack/rewind/stacks"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// BenchmarkDump: park.rb with 100 more threads 20 Ruby frames deep
// (107 threads), dumped in interleaved pairs with and without its Ruby
// frames (each a whole dump: find, read before the pause, capture with
// the re-read in it, attach, unwind, symbolize, warm caches). Reports the
// medians: dump-us with Ruby, native-dump-us without, ratio (issue 41's
// target: ≤ 2), pause-us and native-pause-us, during-us (the Ruby re-read
// in the pause) and the pages it re-reads.
//
//	go test ./runtimes/ruby/ -run XXX -bench Dump -benchtime 20x
func BenchmarkDump(b *testing.B) {
	proc, _ := startPark(b, 100)
	objs := &target.Objects{}
	sym := &symbolize.Symbolizer{Inlines: true}
	u, err := unwind.ByName("auto")
	if err != nil {
		b.Fatal(err)
	}
	var during []float64
	pages := 0
	dump := func(rb bool) (pause, whole time.Duration) {
		start := time.Now()
		var l *ruby.Live
		opt := live.Options{}
		if rb {
			maps, err := procmaps.Read(proc.PID)
			if err != nil {
				b.Fatal(err)
			}
			rt, err := ruby.Find(maps, runtimes.ProcessFile(proc.PID))
			if err != nil || rt == nil {
				b.Fatalf("Find: %v %v", rt, err)
			}
			l = ruby.NewLive(proc.PID, rt)
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
			if err != nil || len(s.Threads) != 107 {
				b.Fatalf("stacks: %v, %d threads", err, len(s.Threads))
			}
			ruby.Attach(tg, s, nil)
			during = append(during, us(l.InPause))
			pages = l.Pages
		}
		rep := stacks.Unwind(tg, stacks.Options{Unwinder: u}, sym)
		if len(rep.Threads) < 107 {
			b.Fatalf("%d threads", len(rep.Threads))
		}
		return snap.Pause, time.Since(start)
	}
	dump(true)
	dump(false)
	var rp, rd, np, nd []float64
	b.ResetTimer()
	for range b.N {
		p, d := dump(true)
		rp, rd = append(rp, us(p)), append(rd, us(d))
		p, d = dump(false)
		np, nd = append(np, us(p)), append(nd, us(d))
	}
	b.StopTimer()
	b.ReportMetric(median(rd), "dump-us")
	b.ReportMetric(median(nd), "native-dump-us")
	b.ReportMetric(median(rd)/median(nd), "ratio")
	b.ReportMetric(median(rp), "pause-us")
	b.ReportMetric(median(np), "native-pause-us")
	b.ReportMetric(median(during), "during-us")
	b.ReportMetric(float64(pages), "pages")
}

func us(d time.Duration) float64 { return float64(d.Microseconds()) }

func median(v []float64) float64 {
	slices.Sort(v)
	return v[len(v)/2]
}
