package fibers_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/rewindstack/rewind/fibers"
	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/stacks"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// BenchmarkTarantool dumps a Tarantool with N parked fibers, every
// thread and fiber, as `rewind dump PID --fibers` does (objects and
// tables shared across iterations, as the persistent caches share them
// between runs): the target's pause and the whole dump, medians.
//
//	go test ./fibers -run '^$' -bench Tarantool -benchtime 10x
func BenchmarkTarantool(b *testing.B) {
	bin, err := exec.LookPath("tarantool")
	if err != nil {
		b.Skip("tarantool not installed (Debian: tarantool)")
	}
	app, _ := filepath.Abs("testdata/tarantool_many.lua")
	for _, n := range []int{48, 10000} {
		b.Run("fibers="+strconv.Itoa(n), func(b *testing.B) {
			cmd := exec.Command(bin, app)
			cmd.Dir = b.TempDir()
			cmd.Env = append(os.Environ(), "NFIBERS="+strconv.Itoa(n))
			p := fixture.StartCmd(b, cmd)
			benchDump(b, p.PID, n, func() ([]fibers.Spec, bool) { return nil, true })
		})
	}
}

func median(v []float64) float64 {
	sort.Float64s(v)
	return v[len(v)/2]
}

// BenchmarkUcontextScan dumps a C program with N ucontext fibers parked
// in swapcontext, found by --fiber-scan and copied in the pause with the
// threads: the target's pause and the whole dump (scan included),
// medians.
//
//	go test ./fibers -run '^$' -bench UcontextScan -benchtime 10x
func BenchmarkUcontextScan(b *testing.B) {
	if _, err := exec.LookPath("gcc"); err != nil {
		b.Skip("gcc not installed")
	}
	exe := filepath.Join(b.TempDir(), "many")
	if out, err := exec.Command("gcc", "-O1", "-g", "-o", exe, "testdata/many_ucontext.c").CombinedOutput(); err != nil {
		b.Fatalf("gcc: %v\n%s", err, out)
	}
	for _, n := range []int{48, 10000} {
		b.Run("fibers="+strconv.Itoa(n), func(b *testing.B) {
			p := fixture.Start(b, exe, strconv.Itoa(n))
			benchDump(b, p.PID, n, func() ([]fibers.Spec, bool) {
				specs, _, err := fibers.ScanLive(p.PID, fibers.ScanLimits{})
				if err != nil {
					b.Fatal(err)
				}
				return specs, false
			})
		})
	}
}

// benchDump dumps process pid with its fibers b.N times, as dump does
// (objects and tables shared across iterations, as the persistent caches
// share them between runs), find giving the explicit contexts (scanned,
// say) and whether to find runtimes' fibers; it reports the medians of
// the target's pause and of the whole dump, and checks n fibers were
// found.
func benchDump(b *testing.B, pid, n int, find func() ([]fibers.Spec, bool)) {
	objs := &target.Objects{}
	sym := &symbolize.Symbolizer{Inlines: true}
	var pause, total []float64
	for i := 0; i < b.N; i++ {
		start := time.Now()
		specs, auto := find()
		fc := fibers.NewCopier(pid, specs, auto, func(s string) { b.Fatal(s) })
		var opt live.Options
		fc.Apply(&opt)
		snap, err := live.Capture(pid, opt)
		if err != nil {
			b.Fatal(err)
		}
		tg := snap.Target(objs, nil)
		tg.Contexts = append(tg.Contexts, fc.Contexts(tg, func(s string) { b.Fatal(s) })...)
		rep := stacks.Report(tg, stacks.Walk(tg, stacks.Options{Unwinder: unwind.NewAuto()}), sym)
		total = append(total, float64(time.Since(start).Microseconds())/1e3)
		pause = append(pause, float64(snap.Pause.Microseconds())/1e3)
		if len(rep.Fibers) < n {
			b.Fatalf("%d fibers found, want at least %d", len(rep.Fibers), n)
		}
	}
	b.ReportMetric(median(pause), "pause-ms")
	b.ReportMetric(median(total), "dump-ms")
}
