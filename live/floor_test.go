package live

import (
	"slices"
	"testing"
	"time"
)

// BenchmarkFloor measures what a capture of a 101-thread process cannot
// go below, beside the capture itself, in interleaved pairs: floor-us is
// the median time from the first PTRACE_INTERRUPT to the return of the
// last PTRACE_DETACH when nothing else is done (each thread interrupted,
// its stop waited for, its registers read, then each detached; the
// threads are seized before, as a capture does), pause-us the median
// pause of a Capture (maps, stacks and the same steps), and
// thread-pause-us the median time one thread of it was stopped. On a
// 2-CPU virtual machine most of either is waking each thread twice, to
// stop it and to resume it, and the context switches that follow.
//
//	go test ./live -run XXX -bench Floor -benchtime 40x
func BenchmarkFloor(b *testing.B) {
	tg := startTarget(b, false, compileC(b, "sleepers"), "100")
	tids, err := listTasks(tg.pid)
	if err != nil {
		b.Fatal(err)
	}
	tr := getTracer()
	var regs [userRegsWords + 8]uint64
	floor := func() time.Duration {
		var d time.Duration
		tr.run(func() {
			defer quietStops()()
			for _, tid := range tids {
				if err := ptraceSeize(tid); err != nil {
					b.Fatalf("seize %d: %v", tid, err)
				}
			}
			start := time.Now()
			for _, tid := range tids {
				ptraceInterrupt(tid)
			}
			for _, tid := range tids {
				for {
					wpid, ws, err := wait4(tid)
					if err != nil {
						b.Fatalf("wait4 %d: %v", tid, err)
					}
					if wpid == tid && ws.Stopped() {
						break
					}
					schedYield()
				}
				getRegset(tid, regs[:])
			}
			for _, tid := range tids {
				ptraceDetach(tid, 0)
			}
			d = time.Since(start)
		})
		return d
	}
	var fl, pa, th []float64
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	for b.Loop() {
		fl = append(fl, us(floor()))
		s, err := Capture(tg.pid, Options{})
		if err != nil {
			b.Fatal(err)
		}
		pa = append(pa, us(s.Pause))
		for _, t := range s.Threads {
			th = append(th, us(t.Stopped))
		}
	}
	med := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	b.ReportMetric(med(fl), "floor-us")
	b.ReportMetric(med(pa), "pause-us")
	b.ReportMetric(med(th), "thread-pause-us")
}
