package goroutines_test

import (
	"io"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rewindstack/rewind/goroutines"
	"github.com/rewindstack/rewind/goroutines/traceback"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// BenchmarkDump dumps a program with 1,000 and 100,000 parked goroutines
// and, interleaved with each dump, has the program take its own
// pprof.Lookup("goroutine").WriteTo(io.Discard, 2). It reports medians:
// the pause rewind imposes (pause-ms), the part of it spent copying the
// goroutines (copy-ms) and the CPU time rewind spent on that copy, user
// and system (copy-cpu-ms: the kernel's copying is system time), rewind's
// whole dump with text output (rewind-ms; caches warm after the first),
// and the program's own dump (own-ms, during which its world is stopped).
// The CPU time says what the pause costs on a loaded machine, where the
// wall times also count waiting for a CPU. Run with
//
//	go test ./goroutines -run '^$' -bench Dump -benchtime 10x
//
// In "1000" and "100000" the program has run two garbage collections
// before the dumps, as any program whose goroutines have been parked for a
// few minutes has (the runtime forces one every two minutes): their
// g.waitsince is set, which proves that they have not run since the read
// before the pause, so their stacks are not copied again in it. In
// "100000-unseen" the program runs with GOGC=off, as a program that has
// just started its goroutines: no collection has seen them parked, and
// a stack is kept when its whole g is unchanged (see parkedCopied);
// "761-unseen" is that with 761 goroutines (755 parked, the main one and
// the runtime's). stopped-threads is the median number of threads
// stopped: those asleep in the kernel are left so
// (live.Options.LeaveAsleep), and an idle program has none stopped, its
// pause zero (scripts/dump-ab.sh --goroutines measures the command's).
func BenchmarkDump(b *testing.B) {
	for _, c := range []struct {
		name string
		n    int
		gogc string
	}{{"761-unseen", 755, "off"}, {"1000", 1000, ""}, {"100000", 100000, ""}, {"100000-unseen", 100000, "off"}} {
		b.Run(c.name, func(b *testing.B) {
			benchDump(b, c.n, c.gogc)
		})
	}
}

func benchDump(b *testing.B, n int, gogc string) {
	requirePtrace(b)
	exe := buildParked(b, nil)
	var env []string
	if gogc != "" {
		env = append(env, "GOGC="+gogc)
	}
	p := startParkedArgs(b, exe, "", []string{"bench", strconv.Itoa(n)}, env...)
	pid := p.cmd.Process.Pid
	if gogc == "" {
		if _, err := io.WriteString(p.in, "gc\n"); err != nil {
			b.Fatal(err)
		}
		if line, err := p.out.ReadString('\n'); err != nil || line != "ok\n" {
			b.Fatalf("fixture answered %q, %v", line, err)
		}
	}
	u, _ := unwind.ByName("auto")
	sym := &symbolize.Symbolizer{Inlines: true}
	objs := &target.Objects{}
	var copies, copyCPUs []time.Duration
	kept := 0
	var stopped []time.Duration // thread counts, for median
	dump := func() (pause, total time.Duration, count int) {
		start := time.Now()
		snap, set, err := goroutines.Capture(pid, live.Options{})
		if err != nil {
			b.Fatal(err)
		}
		rep := traceback.New(set, snap.Target(objs, nil), u, sym)
		if len(rep.Notes) > 0 && count == 0 {
			b.Logf("notes: %d, first %q", len(rep.Notes), rep.Notes[0])
		}
		if err := traceback.WriteText(io.Discard, rep); err != nil {
			b.Fatal(err)
		}
		w, u, sy := goroutines.CopyCost(set)
		copies, copyCPUs = append(copies, w), append(copyCPUs, u+sy)
		kept = goroutines.KeptStacks(set)
		stopped = append(stopped, time.Duration(len(snap.Threads)-snap.Phases.Asleep))
		return snap.Pause, time.Since(start), len(rep.Goroutines)
	}
	own := func() time.Duration {
		if _, err := io.WriteString(p.in, "time\n"); err != nil {
			b.Fatal(err)
		}
		line, err := p.out.ReadString('\n')
		if err != nil {
			b.Fatal(err)
		}
		ns, _ := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
		return time.Duration(ns)
	}
	dump() // cold: opens the binary, builds tables and symbol caches
	copies, copyCPUs, stopped = copies[:0], copyCPUs[:0], stopped[:0]
	var pauses, totals, owns []time.Duration
	count := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pause, total, c := dump()
		pauses, totals, count = append(pauses, pause), append(totals, total), c
		owns = append(owns, own())
	}
	b.StopTimer()
	if count < n {
		b.Fatalf("dumped %d goroutines, want >= %d", count, n)
	}
	b.ReportMetric(ms(median(pauses)), "pause-ms")
	b.ReportMetric(ms(median(copies)), "copy-ms")
	b.ReportMetric(ms(median(copyCPUs)), "copy-cpu-ms")
	b.ReportMetric(ms(median(totals)), "rewind-ms")
	b.ReportMetric(ms(median(owns)), "own-ms")
	b.ReportMetric(float64(median(stopped)), "stopped-threads")
	b.Logf("%d goroutines (%d stacks not copied again in the last pause): pause %v (copying them %v, CPU %v), rewind %v, the program's own debug=2 dump %v (medians of %d pairs)",
		count, kept, median(pauses), median(copies), median(copyCPUs), median(totals), median(owns), b.N)
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
