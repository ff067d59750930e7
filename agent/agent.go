// Package agent is rewind's continuous profiler (rewind agent): it samples
// every process of the host, or those selected by PID, cgroup or command
// name, at a low rate (19 Hz per CPU by default) with user stack copies,
// and, with off-CPU profiling, records every context switch of a blocked
// thread with its stack; every period it unwinds the copies with the same
// unwinders as rewind record (SFrame, CFI, frame pointers per frame),
// symbolizes them on the host (or leaves that to the backend, keeping
// build-ids and file offsets), and hands one profile per type to its
// exporters: OTLP profiles over gRPC or HTTP, a Pyroscope /ingest push,
// rotated pprof files. Exporters run behind bounded queues: a backend that
// is down costs bounded memory, drops the oldest profiles and never blocks
// sampling.
//
// With --unwind-in kernel (or auto, when the BPF programs load) the stacks
// are unwound and counted in the kernel instead (package bpfunwind): every
// period the agent reads the counts once and hands the finished stacks to
// the same per-period Builder, so symbolization and exports are shared.
package agent

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rewindstack/rewind/bpfunwind"
	"github.com/rewindstack/rewind/perfdata"
	"github.com/rewindstack/rewind/perfevent"
	"github.com/rewindstack/rewind/profiles"
	"github.com/rewindstack/rewind/runtimes"
	"github.com/rewindstack/rewind/session"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/unwind"
)

// Profile types.
const (
	// TypeCPU is the on-CPU profile: cpu-clock samples, values in
	// nanoseconds of CPU time.
	TypeCPU = "cpu"
	// TypeOffCPU is the off-CPU profile: the stacks threads blocked
	// with, values in nanoseconds off CPU.
	TypeOffCPU = "off_cpu"
)

// Config configures an agent.
type Config struct {
	// Scope selects processes by PID or cgroup (default: all).
	Scope perfevent.Scope
	// Comm, when set, keeps only samples of threads whose process's
	// command name (or the thread's) matches.
	Comm *regexp.Regexp
	// Freq is the sampling frequency in Hz per CPU (default 19).
	Freq int
	// Period is how often profiles are exported (default 60 s).
	Period time.Duration
	// OffCPU adds the off-CPU profile.
	OffCPU bool
	// NoSymbolize exports addresses with their mappings' build-ids and
	// file offsets and no function names, for backends that symbolize.
	NoSymbolize bool
	// StackSize is the user stack bytes copied per sample (default 16 KiB).
	StackSize int
	// UserOnly leaves out kernel frames.
	UserOnly bool
	// Method is the unwinder ("auto" by default).
	Method string
	// UnwindIn is where user stacks are unwound: UnwindKernel,
	// UnwindUser or UnwindAuto (the default).
	UnwindIn string
	// Exporters receive every period's profiles.
	Exporters []Exporter
	// QueueLen bounds each exporter's queue of periods (default 16).
	QueueLen int
	// Log receives one progress line per period (nil: none).
	Log io.Writer
	// Warn receives warnings (may be nil).
	Warn func(string)
	// CacheDir, when set, keeps unwind tables and symbol indexes there.
	CacheDir string
	// Ready, when set, is called once the events are open.
	Ready func()
	// DropPrivileges, once the events are open, reduces the process's
	// capabilities to KeptCapabilities (see DropPrivileges).
	DropPrivileges bool
}

// Period is one exported profile: one type over one period.
type Period struct {
	Type       string
	Start, End time.Time
	Profile    *profiles.Profile
	// Symbolized is false for --no-symbolize.
	Symbolized bool
	// Procs describes the processes with samples, by PID.
	Procs map[int]*ProcInfo
	// Host is the host name.
	Host string
	// Seq numbers the periods of a type from 1.
	Seq int
}

// Agent is a running continuous profiler.
type Agent struct {
	cfg     Config
	cpuCol  *profiles.Collector
	cpuRec  *perfevent.Recorder
	off     *profiles.OffCPU
	offRec  *perfevent.Recorder
	offCol  *profiles.Collector
	sym     *symbolize.Symbolizer
	methods []profiles.Method
	procs   *procTable
	host    string
	queues  []*queue
	seq     map[string]int
	kernel  func() *symbolize.Kallsyms
	kOnce   sync.Once
	ksyms   *symbolize.Kallsyms
	// jobs carries periods to the goroutine that unwinds, symbolizes and
	// exports them, so that the ring buffers are read meanwhile.
	jobs        chan buildJob
	lastPartial time.Time
	builders    map[string]*profiles.Builder // the current period's, on the builder goroutine
	// stats
	began   time.Time // when Run was called (the ready line's start-up time)
	periods int
	bpf     struct {
		d time.Duration
		n uint64
	} // the BPF programs' run time at the last period line
	work bpfunwind.WorkStats // the unwinder's work at the last period line
	last struct{ samples, lost, switches, switchesLost uint64 }
}

func (c *Config) fill() {
	if c.Freq == 0 {
		c.Freq = 19
	}
	if c.Period == 0 {
		c.Period = time.Minute
	}
	if c.Method == "" {
		c.Method = "auto"
	}
	if c.UnwindIn == "" {
		c.UnwindIn = UnwindAuto
	}
	if c.QueueLen == 0 {
		c.QueueLen = 16
	}
	if c.Warn == nil {
		c.Warn = func(string) {}
	}
}

// Run profiles until ctx is done, then exports the current period, waits
// (up to 10 s) for the exporters to send what they hold, and returns.
func Run(ctx context.Context, cfg Config) error {
	cfg.fill()
	a := &Agent{cfg: cfg, seq: map[string]int{}, builders: map[string]*profiles.Builder{}, lastPartial: time.Now(), began: time.Now()}
	u, err := unwind.ByName(cfg.Method)
	if err != nil {
		return err
	}
	a.methods = []profiles.Method{{Name: cfg.Method, Unwinder: u}}
	a.host, _ = os.Hostname()
	a.sym = &symbolize.Symbolizer{Inlines: !cfg.NoSymbolize}
	if cfg.CacheDir != "" {
		a.sym.Cache = symbolize.NewPersistentCache(cfg.CacheDir)
	}
	a.kernel = func() *symbolize.Kallsyms {
		a.kOnce.Do(func() {
			ks, err := symbolize.LoadKallsymsCached(cfg.CacheDir)
			if err != nil {
				cfg.Warn("kernel frames are not named: " + err.Error())
			}
			a.ksyms = ks
		})
		return a.ksyms
	}
	a.procs = newProcTable()
	a.cpuCol = a.newCollector()
	if u, err := a.loadKernel(); err != nil || u != nil {
		if err != nil {
			return err
		}
		if err := a.runKernel(ctx, u); err != nil {
			return err
		}
		return a.unsentError()
	}
	opt := perfevent.Options{Freq: cfg.Freq, StackSize: cfg.StackSize, UserOnly: cfg.UserOnly, Warn: cfg.Warn, BufferPages: 128}
	// The interpreters' frames (Python's) are read from the sampled
	// processes as each sample is read, as rewind record reads them.
	sampling := &runtimes.Sampling{Now: perfevent.Now, LateAfter: time.Second / time.Duration(max(cfg.Freq, 1)), Warn: cfg.Warn}
	defer sampling.Close()
	a.cpuCol.Interp, opt.Prompt = sampling, true
	if err := a.seed(a.cpuCol); err != nil {
		return err
	}
	if a.cpuRec, err = perfevent.OpenScope(cfg.Scope, opt); err != nil {
		return err
	}
	defer a.cpuRec.Close()
	var offPump *session.Pump
	if cfg.OffCPU {
		f, err := perfevent.ReadSwitchFormat()
		if err != nil {
			return err
		}
		a.offCol = a.newCollector()
		if err := a.seed(a.offCol); err != nil {
			return err
		}
		a.off = profiles.NewOffCPU(a.offCol, f, a.keep)
		offOpt := opt
		offOpt.BufferPages = 1024 // every blocking switch carries a stack copy
		offOpt.Prompt = false
		if a.offRec, err = perfevent.OpenSwitches(cfg.Scope, offOpt); err != nil {
			return fmt.Errorf("off-CPU profile: %w", err)
		}
		defer a.offRec.Close()
		offPump = &session.Pump{Source: a.offRec, Add: a.off.Add, Warn: cfg.Warn}
	}
	a.startQueues()
	if cfg.DropPrivileges {
		if err := DropPrivileges(KeptCapabilities); err != nil {
			cfg.Warn(err.Error())
		}
	}
	a.logReady("unwinding stack copies in user space")
	if cfg.Ready != nil {
		cfg.Ready()
	}
	start := time.Now()
	startMono := perfevent.Now()
	next := start.Add(cfg.Period)
	// The agent's recording ends with ctx; its periods are cut between
	// reads.
	cpu := &session.Session{Recorder: a.cpuRec, Collector: a.cpuCol, Add: a.addCPU, Warn: cfg.Warn, Interval: 100 * time.Millisecond, Idle: sampling.Idle}
	cpu.Tick = func() string {
		if offPump != nil {
			offPump.Read()
		}
		a.partial()
		if now := time.Now(); !now.Before(next) {
			mono := perfevent.Now()
			a.flush(start, now, startMono, mono)
			start, startMono = now, mono
			next = next.Add(cfg.Period)
			if next.Before(now) {
				next = now.Add(cfg.Period)
			}
		}
		return ""
	}
	built := a.startExports()
	cpu.Run(ctx)
	if offPump != nil {
		a.offRec.Disable()
		offPump.Read()
	}
	a.flush(start, time.Now(), startMono, perfevent.Now())
	close(a.jobs)
	<-built
	a.drainQueues(drainLimit)
	a.logStop("")
	return a.unsentError()
}

// UnsentError is Run's error when profiles were lost: dropped from a
// full queue while a backend was down or slow, or still queued when the
// drain time ran out. A run that lost data must not end as a success
// (the agent's exit status says so).
type UnsentError struct {
	// Unsent is how many profiles the queues held when Run stopped;
	// Dropped, how many a full queue dropped (the oldest) during the run.
	Unsent, Dropped int
	// Exporters names the exporters that lost profiles.
	Exporters []string
}

func (e *UnsentError) Error() string {
	var what []string
	if e.Unsent > 0 {
		what = append(what, fmt.Sprintf("%d profiles were not sent when the agent stopped", e.Unsent))
	}
	if e.Dropped > 0 {
		what = append(what, fmt.Sprintf("%d were dropped from a full queue", e.Dropped))
	}
	return fmt.Sprintf("%s (%s): the backend failed or was too slow (see the warnings above); check that it is up and can store them", strings.Join(what, "; "), strings.Join(e.Exporters, ", "))
}

// unsentError is an *UnsentError when a queue lost profiles, else nil.
func (a *Agent) unsentError() error {
	var e UnsentError
	for _, q := range a.queues {
		_, d, _, n := q.stats()
		if d > 0 || n > 0 {
			e.Unsent += n
			e.Dropped += int(d)
			e.Exporters = append(e.Exporters, q.exp.Name())
		}
	}
	if e.Unsent+e.Dropped > 0 {
		return &e
	}
	return nil
}

// startQueues starts every exporter behind its queue.
func (a *Agent) startQueues() {
	for _, e := range a.cfg.Exporters {
		q := newQueue(e, a.cfg.QueueLen, a.cfg.Warn)
		a.queues = append(a.queues, q)
		go q.run()
	}
}

// logReady prints the line that says sampling has begun, and how long
// the start took (loading programs, reading the processes' mappings).
func (a *Agent) logReady(how string) {
	if a.cfg.Log != nil {
		fmt.Fprintf(a.cfg.Log, "rewind agent: ready after %s (%s)\n", time.Since(a.began).Round(time.Millisecond), how)
	}
}

// logStop prints the agent's last line, ending with more.
func (a *Agent) logStop(more string) {
	if a.cfg.Log != nil {
		sent, dropped, failed, unsent := a.queueStats()
		fmt.Fprintf(a.cfg.Log, "rewind agent: stopped after %d periods; profiles sent %d, dropped %d, failed sends %d, unsent %d%s\n",
			a.periods, sent, dropped, failed, unsent, more)
	}
}

// queueStats sums the exporters' queues' counts and depths.
func (a *Agent) queueStats() (sent, dropped, failed uint64, depth int) {
	for _, q := range a.queues {
		s, d, f, n := q.stats()
		sent, dropped, failed, depth = sent+s, dropped+d, failed+f, depth+n
	}
	return
}

// drainLimit is how long Run waits, once stopped, for the exporters to
// send what they hold.
var drainLimit = 10 * time.Second

// buildJob is samples of one type, for the builder goroutine: a part of
// the current period, or (final) its last part, after which the period's
// profile is exported.
type buildJob struct {
	typ        string
	start, end time.Time
	samples    []*profiles.Sample
	col        *profiles.Collector
	final      bool
}

// Partial builds: every partialEvery, or when a collector holds more than
// partialBytes of stack copies, the samples older than partialLag are
// handed to the builder, so that a period's stack copies do not pile up
// (see partial).
var (
	partialEvery = 5 * time.Second
	partialBytes = 16 << 20
	partialLag   = 2 * time.Second
	// partialMaxBytes of stack copies waiting make the pump wait for the
	// builder (and the ring buffers overflow, counted as lost).
	partialMaxBytes = 64 << 20
)

// beforeBuild, when set (by tests), runs before every build job.
var beforeBuild func()

// partial hands the samples old enough to the builder goroutine, unless
// it is busy: the pump goroutine, which reads the ring buffers, waits for
// it only at the end of a period or once the stack copies waiting reach
// partialMaxBytes, so a slow build (a loaded host) neither overflows the
// buffers nor stretches the period while memory allows. The channel
// keeps room for the period's end.
func (a *Agent) partial() {
	pending := a.cpuCol.PendingBytes()
	if a.offCol != nil {
		pending = max(pending, a.offCol.PendingBytes())
	}
	if pending <= partialBytes && time.Since(a.lastPartial) < partialEvery {
		return
	}
	perPeriod := 1
	if a.off != nil {
		perPeriod = 2
	}
	if cap(a.jobs)-len(a.jobs) < 2*perPeriod && pending <= partialMaxBytes {
		return // the builder is behind: try again at the next check
	}
	a.lastPartial = time.Now()
	now := perfevent.Now()
	if now < uint64(partialLag) {
		return
	}
	before := now - uint64(partialLag)
	if s := a.cpuCol.Take(before); len(s) > 0 {
		a.jobs <- buildJob{typ: TypeCPU, samples: s, col: a.cpuCol}
	}
	if a.off != nil {
		if s := a.off.Take(before); len(s) > 0 {
			a.jobs <- buildJob{typ: TypeOffCPU, samples: s, col: a.offCol}
		}
	}
}

func (a *Agent) newCollector() *profiles.Collector {
	c := profiles.NewCollector(perfevent.Arch())
	c.Warn = a.cfg.Warn
	if a.cfg.CacheDir != "" {
		c.Objects.Tables.Dir = a.cfg.CacheDir
	}
	return c
}

// seed reads the mappings of the processes already running.
func (a *Agent) seed(c *profiles.Collector) error {
	pids := a.cfg.Scope.PIDs
	if len(pids) == 0 {
		pids = allPIDs()
	}
	for _, pid := range pids {
		if err := c.AddProcess(pid); err != nil && len(a.cfg.Scope.PIDs) > 0 {
			return fmt.Errorf("process %d: %w", pid, err)
		}
	}
	return nil
}

// addCPU filters the cpu-clock recorder's samples by --comm. Lost
// counts stay with the recorder (the builder goroutine reads the
// collector's).
func (a *Agent) addCPU(r *perfdata.Record) {
	switch r.Type {
	case perfdata.RecordLost, perfdata.RecordLostSamples:
		return
	case perfdata.RecordSample:
		if !a.keep(int(r.Sample.PID), int(r.Sample.TID)) {
			return
		}
	}
	a.cpuCol.Add(r)
}

// keep reports whether a thread's samples are profiled (--comm); it skips
// the agent's own threads.
func (a *Agent) keep(pid, tid int) bool {
	if pid == os.Getpid() {
		return false
	}
	if a.cfg.Comm == nil {
		return true
	}
	return a.procs.matches(pid, tid, a.cfg.Comm, a.cpuCol.Comm(tid))
}

// flush builds and exports the period [start, end).
func (a *Agent) flush(start, end time.Time, startMono, endMono uint64) {
	a.periods++
	a.jobs <- buildJob{TypeCPU, start, end, a.cpuCol.Take(math.MaxUint64), a.cpuCol, true}
	a.cpuCol.Prune(alive)
	if a.off != nil {
		a.jobs <- buildJob{TypeOffCPU, start, end, a.off.Flush(endMono), a.offCol, true}
		a.offCol.Prune(alive)
	}
	if a.cfg.Log != nil {
		sent, dropped, failed, depth := a.queueStats()
		smp, lost := a.cpuRec.Samples(), a.cpuRec.Lost()
		off := ""
		if a.offRec != nil {
			sw, swLost := a.offRec.Samples(), a.offRec.Lost()
			off = fmt.Sprintf(", %d context switches (%d lost)", sw-a.last.switches, swLost-a.last.switchesLost)
			a.last.switches, a.last.switchesLost = sw, swLost
		}
		fmt.Fprintf(a.cfg.Log, "rewind agent: period %d (%s): %d samples (%d lost)%s; profiles sent %d, dropped %d, failed sends %d, queue depth %d\n",
			a.periods, end.Sub(start).Round(time.Millisecond), smp-a.last.samples, lost-a.last.lost, off, sent, dropped, failed, depth)
		a.last.samples, a.last.lost = smp, lost
	}
}

// export unwinds and symbolizes one period's samples and queues the
// profile for every exporter. It runs on the builder goroutine: the
// collector's address spaces are built there, while the pump goroutine
// only adds records and takes samples.
func (a *Agent) export(j buildJob) {
	if beforeBuild != nil {
		beforeBuild()
	}
	b := a.builders[j.typ]
	if b == nil {
		b = profiles.NewBuilder(j.col, profiles.Options{Methods: a.methods, Symbolizer: a.sym, Kernel: a.kernel, NoSymbols: a.cfg.NoSymbolize})
		a.builders[j.typ] = b
	}
	b.Add(j.samples)
	if !j.final {
		return
	}
	delete(a.builders, j.typ)
	prof := b.Profile()
	prof.OffCPU = j.typ == TypeOffCPU
	a.seq[j.typ]++
	p := &Period{Type: j.typ, Start: j.start, End: j.end, Profile: prof, Symbolized: !a.cfg.NoSymbolize, Host: a.host, Seq: a.seq[j.typ], Procs: map[int]*ProcInfo{}}
	for _, s := range prof.Stacks {
		if _, ok := p.Procs[s.PID]; !ok {
			p.Procs[s.PID] = a.procs.info(s.PID, s.Comm)
		}
	}
	if a.cfg.NoSymbolize {
		stripNames(prof)
	}
	for _, q := range a.queues {
		q.push(p)
	}
}

// stripNames leaves every user location its address and mapping only.
func stripNames(p *profiles.Profile) {
	for _, l := range p.Locations {
		if !l.Kernel {
			l.Lines = []symbolize.Location{{}}
		}
	}
}

func (a *Agent) drainQueues(limit time.Duration) {
	deadline := time.Now().Add(limit)
	for _, q := range a.queues {
		q.close()
	}
	for _, q := range a.queues {
		q.wait(time.Until(deadline))
	}
}

// alive reports whether a process or thread still exists.
func alive(id int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(id))
	return err == nil
}

func allPIDs() []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err == nil && pid > 0 && !strings.ContainsAny(e.Name(), "-+") {
			out = append(out, pid)
		}
	}
	return out
}

// startExports starts the goroutine that builds and exports each period's
// profiles in order, fed through a.jobs; the returned channel closes once
// a.jobs is closed and the last job is done.
func (a *Agent) startExports() <-chan struct{} {
	a.jobs = make(chan buildJob, 4)
	built := make(chan struct{})
	go func() {
		defer close(built)
		for j := range a.jobs {
			a.export(j)
		}
	}()
	return built
}
