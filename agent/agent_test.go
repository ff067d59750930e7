package agent

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"

	"github.com/rewindstack/rewind/internal/testutil/perftest"
	"github.com/rewindstack/rewind/perfevent"
)

// receiver is an OTLP profiles gRPC server made of the official types; it
// keeps a copy of every request.
type receiver struct {
	pprofileotlp.UnimplementedGRPCServer
	mu   sync.Mutex
	got  []pprofile.Profiles
	down bool
}

func (r *receiver) Export(_ context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	b, err := req.MarshalProto()
	if err != nil {
		return pprofileotlp.NewExportResponse(), err
	}
	cp := pprofileotlp.NewExportRequest()
	if err := cp.UnmarshalProto(b); err != nil {
		return pprofileotlp.NewExportResponse(), err
	}
	r.mu.Lock()
	r.got = append(r.got, cp.Profiles())
	r.mu.Unlock()
	return pprofileotlp.NewExportResponse(), nil
}

func (r *receiver) samples() []flatSample {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []flatSample
	for _, p := range r.got {
		out = append(out, flatten(p)...)
	}
	return out
}

// requireOffCPU skips unless this process may record sched_switch.
func requireOffCPU(t *testing.T) {
	t.Helper()
	perftest.RequirePerfEvent(t)
	if _, err := perfevent.TracepointID("sched", "sched_switch"); err != nil {
		t.Skipf("off-CPU profiles need tracefs and root or CAP_PERFMON: %v", err)
	}
}

// fixtures starts the CPU-bound fixture (one thread in burn -> level1 ->
// ... -> hash_block/sort_block, so that the tests of other packages
// running meanwhile keep a core) and the sleeping one.
func fixtures(t *testing.T) (cpuPID, sleepPID int) {
	cpu := start(t, perftest.BuildCPU(t, "-fno-omit-frame-pointer"), "600", "1")
	sl := start(t, buildSleeper(t), "0.2")
	time.Sleep(100 * time.Millisecond) // past exec and the dynamic loader
	return cpu.Process.Pid, sl.Process.Pid
}

// checkFixtures asserts that the CPU profile has the CPU fixture's
// functions on top and the off-CPU profile the sleeper's full stack, with
// the sleeper off CPU for about every full period's length.
func checkFixtures(t *testing.T, got []flatSample, cpuPID, sleepPID int, period time.Duration) {
	t.Helper()
	var cpuHits, cpuTotal int64
	offByStart := map[int64]int64{}
	durations := map[int64]int64{}
	var offFull int
	var offValue, offKernel int64
	others := map[string]int64{}
	for _, s := range got {
		switch {
		case s.Type == "cpu" && s.PID == int64(cpuPID):
			cpuTotal += s.Value
			if top := fixtureTop(s); (top == "hash_block" || top == "sort_block" || top == "cmp_u32") && strings.Contains(strings.Join(s.Funcs, ";"), "level1;burn") {
				cpuHits += s.Value
			} else {
				others[strings.Join(s.Funcs, ";")] += s.Value
			}
		case s.Type == "off_cpu" && s.PID == int64(sleepPID):
			st := strings.Join(s.Funcs, ";")
			if !strings.Contains(st, "sleeper_block;sleeper_wait;main") {
				t.Errorf("sleeper off-CPU stack %s lacks sleeper_block;sleeper_wait;main", st)
				continue
			}
			offFull++
			offValue += s.Value
			// Kernel frames, when permitted: the scheduler's, above the
			// C library's nanosleep.
			if i, j := strings.Index(st, "schedule;"), strings.Index(st, "sleeper_block;"); i >= 0 && i < j && strings.Contains(st[i:j], "nanosleep;") {
				offKernel += s.Value
			}
			offByStart[s.Start] += s.Value
			durations[s.Start] = s.Duration
		}
	}
	if cpuTotal == 0 || float64(cpuHits) < 0.95*float64(cpuTotal) {
		t.Errorf("CPU fixture: %d of %d ns with hash_block/sort_block/cmp_u32 its innermost function, under burn; want nearly all; the others: %v", cpuHits, cpuTotal, others)
	}
	if offFull == 0 {
		t.Fatalf("no off-CPU sample of the sleeper with its full stack")
	}
	if kernelPermitted() && float64(offKernel) < 0.9*float64(offValue) {
		t.Errorf("kernel frames are permitted, but only %v of the sleeper's %v off CPU has schedule above nanosleep", time.Duration(offKernel), time.Duration(offValue))
	}
	full := 0
	first := int64(math.MaxInt64)
	for start := range offByStart {
		first = min(first, start)
	}
	for start, v := range offByStart {
		d := durations[start]
		if d < int64(period)*9/10 {
			continue // the last, partial period
		}
		if start == first && len(offByStart) > 2 {
			// The first period misses the interval the sleeper began
			// before the programs were attached, and in the kernel's
			// count (an interval counts when it ends) more under load
			// (1.4 s of 2 s seen at load 6, while the process was being
			// described): the full periods after it are held to the
			// period.
			continue
		}
		full++
		if float64(v) < 0.85*float64(d) || float64(v) > 1.05*float64(d) {
			t.Errorf("period at %d (%v): sleeper off CPU %v, want about the period", start, time.Duration(d), time.Duration(v))
		}
	}
	if full == 0 {
		t.Errorf("no full period with the sleeper off CPU: %v", offByStart)
	}
}

// kernelPermitted reports whether perf events may record kernel frames
// of other processes: root (the off-CPU tests need it anyway).
func kernelPermitted() bool { return os.Geteuid() == 0 }

// fixtureTop is the name of a sample's innermost frame in the profiled
// process's own executable: the CPU fixture's function running, under
// whatever libc (qsort) or kernel (interrupt) frames were above it.
func fixtureTop(s flatSample) string {
	for i, f := range s.Files {
		if f == s.Exe {
			return s.Funcs[i]
		}
	}
	return ""
}

// TestAgentOTLP runs the agent on the two fixtures with a 2 s period,
// exporting over OTLP gRPC to a receiver made of the official types and to
// local pprof files, and compares both.
func TestAgentOTLP(t *testing.T) {
	requireOffCPU(t)
	// Periods are built in parts (see partial): the parts add up.
	defer func(e, l time.Duration) { partialEvery, partialLag = e, l }(partialEvery, partialLag)
	partialEvery, partialLag = 300*time.Millisecond, 200*time.Millisecond
	cpuPID, sleepPID := fixtures(t)

	lis, err := netListen()
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rcv := &receiver{}
	pprofileotlp.RegisterGRPCServer(srv, rcv)
	go srv.Serve(lis)
	defer srv.Stop()

	g, err := NewGRPC(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	dir := t.TempDir()
	d, _ := NewDir(dir, 100, 19)
	const period = 2 * time.Second
	ctx, ready, cancel := runningFor(5 * time.Second)
	defer cancel()
	var log strings.Builder
	cfg := Config{Scope: perfevent.Scope{PIDs: []int{cpuPID, sleepPID}}, Freq: 99, Period: period, OffCPU: true,
		Exporters: []Exporter{g, d}, Log: &log, Warn: func(s string) { t.Log("warning: " + s) }, Ready: ready}
	if err := Run(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Logf("progress:\n%s", log.String())
	if n := strings.Count(log.String(), "rewind agent: period"); n != 3 {
		t.Errorf("%d progress lines, want 3 (2 full periods, 1 partial at the stop)", n)
	}
	got := rcv.samples()
	checkFixtures(t, got, cpuPID, sleepPID, period)

	// Every OTLP profile holds what the local pprof of the same period
	// holds.
	otlp := map[string]int64{}
	for _, s := range got {
		otlp[fmt.Sprintf("%s %d %d", s.Type, s.Start, s.PID)] += s.Value
	}
	local := localTotals(t, dir)
	if len(local) == 0 || len(local) != len(otlp) {
		t.Errorf("%d (type, period, process) totals over OTLP, %d in the pprof files", len(otlp), len(local))
	}
	for k, v := range local {
		if otlp[k] != v {
			t.Errorf("%s: OTLP total %d, local pprof %d", k, otlp[k], v)
		}
	}
}

// localTotals sums the pprof files of dir by "type start pid".
func localTotals(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	local := map[string]int64{}
	files, _ := filepath.Glob(filepath.Join(dir, "*.pb.gz"))
	for _, f := range files {
		typ := TypeCPU
		if strings.Contains(f, "off_cpu") {
			typ = TypeOffCPU
		}
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		p, err := profile.Parse(fh)
		fh.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range p.Sample {
			local[fmt.Sprintf("%s %d %d", typ, p.TimeNanos, s.NumLabel["pid"][0])] += s.Value[1]
		}
	}
	return local
}
