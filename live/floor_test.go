package live

import (
	"fmt"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// BenchmarkFloor measures what a capture of a 101-thread process cannot
// go below, beside the capture itself, in interleaved runs: floor-us is
// the median time from the first PTRACE_INTERRUPT to the return of the
// last PTRACE_DETACH when nothing else is done (each thread interrupted,
// its stop waited for, its registers read, then each detached; the
// threads are seized before, as a capture does), pause-us the median
// pause of a Capture (maps, stacks and the same steps), and
// thread-pause-us the median time one thread of it was stopped.
// cfloor-us is the floor's steps done by a C program (testdata/cfloor.c,
// the same calls in the same order at the same priority), run between
// them, so that the Go tracer is compared with plain C on the same
// machine at the same moment; the -intr, -wait and -detach metrics split
// both floors into their three loops. On a 2-CPU virtual machine most of
// either floor is waking each thread twice, to stop it and to resume it,
// and the context switches that follow; Go and C come out within noise
// of each other (load 10-20: floor 2.1-3.2 ms, cfloor 2.3 ms).
//
//	go test ./live -run XXX -bench Floor -benchtime 40x
func BenchmarkFloor(b *testing.B) {
	tg := startTarget(b, false, compileC(b, "sleepers"), "100")
	cfloor := compileC(b, "cfloor")
	tids, err := listTasks(tg.pid)
	if err != nil {
		b.Fatal(err)
	}
	tr := getTracer()
	var regs [userRegsWords + 8]uint64
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	// The floor's loops: interrupt, wait (and read registers), detach,
	// and the whole, in microseconds.
	type phases [4]float64
	floor := func() (p phases) {
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
			t1 := time.Now()
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
			t2 := time.Now()
			for _, tid := range tids {
				ptraceDetach(tid, 0)
			}
			end := time.Now()
			p = phases{us(t1.Sub(start)), us(t2.Sub(t1)), us(end.Sub(t2)), us(end.Sub(start))}
		})
		return p
	}
	cFloor := func() (p phases) {
		out, err := exec.Command(cfloor, fmt.Sprint(tg.pid)).Output()
		if err != nil {
			b.Fatalf("cfloor: %v", err)
		}
		if _, err := fmt.Sscan(string(out), &p[0], &p[1], &p[2], &p[3]); err != nil {
			b.Fatalf("cfloor printed %q: %v", out, err)
		}
		return p
	}
	var fl, cf [4][]float64
	var pa, th []float64
	i := 0
	for b.Loop() {
		// Each measurement comes first in turn: one that follows
		// another runs while that one's threads still resume.
		for k := range 3 {
			switch (i + k) % 3 {
			case 0:
				for j, v := range floor() {
					fl[j] = append(fl[j], v)
				}
			case 1:
				s, err := Capture(tg.pid, Options{})
				if err != nil {
					b.Fatal(err)
				}
				pa = append(pa, us(s.Pause))
				for _, t := range s.Threads {
					th = append(th, us(t.Stopped))
				}
			case 2:
				for j, v := range cFloor() {
					cf[j] = append(cf[j], v)
				}
			}
		}
		i++
	}
	med := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	b.ReportMetric(med(fl[3]), "floor-us")
	b.ReportMetric(med(pa), "pause-us")
	b.ReportMetric(med(th), "thread-pause-us")
	b.ReportMetric(med(cf[3]), "cfloor-us")
	for j, name := range []string{"intr", "wait", "detach"} {
		b.ReportMetric(med(fl[j]), "floor-"+name+"-us")
		b.ReportMetric(med(cf[j]), "cfloor-"+name+"-us")
	}
}
