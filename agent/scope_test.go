package agent

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/testutil/perftest"
	"github.com/rewindstack/rewind/perfevent"
)

// collect is an exporter keeping every period.
type collect struct {
	mu  sync.Mutex
	got []*Period
}

func (c *collect) Name() string { return "collect" }

func (c *collect) Export(_ context.Context, p *Period) error {
	c.mu.Lock()
	c.got = append(c.got, p)
	c.mu.Unlock()
	return nil
}

// pids returns the processes with samples of type typ.
func (c *collect) pids(typ string) map[int]int64 {
	out := map[int]int64{}
	for _, p := range c.got {
		if p.Type != typ {
			continue
		}
		for _, s := range p.Profile.Stacks {
			out[s.PID] += s.Value
		}
	}
	return out
}

func runFor(t *testing.T, cfg Config, d time.Duration) *collect {
	t.Helper()
	c := &collect{}
	cfg.Exporters = []Exporter{c}
	cfg.Period = time.Second
	cfg.Freq = 99
	cfg.Warn = func(s string) { t.Log("warning: " + s) }
	ctx, ready, cancel := runningFor(d)
	defer cancel()
	cfg.Ready = ready
	if err := Run(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAgentComm profiles the whole host, keeping only the sleeper by its
// command name: its off-CPU samples arrive, the CPU fixture's do not.
func TestAgentComm(t *testing.T) {
	requireOffCPU(t)
	cpuPID, _ := fixtures(t)
	// A name no other process has.
	name := fmt.Sprintf("rwsl%d", os.Getpid()%100000)
	exe := filepath.Join(t.TempDir(), name)
	b, err := os.ReadFile(buildSleeper(t))
	if err == nil {
		err = os.WriteFile(exe, b, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	sleepPID := start(t, exe, "0.1").Process.Pid
	re := "^" + name + "$"
	c := runFor(t, Config{Comm: regexp.MustCompile(re), OffCPU: true}, 2500*time.Millisecond)
	off, cpu := c.pids(TypeOffCPU), c.pids(TypeCPU)
	if off[sleepPID] == 0 {
		t.Errorf("no off-CPU samples of the sleeper (pid %d): %v", sleepPID, off)
	}
	for pid := range off {
		if pid != sleepPID {
			t.Errorf("off-CPU samples of process %d, which --comm %s excludes", pid, re)
		}
	}
	if cpu[cpuPID] != 0 {
		t.Errorf("CPU samples of the CPU fixture (pid %d), which --comm %s excludes", cpuPID, re)
	}
}

// TestAgentCgroup profiles one cgroup (v2) holding the CPU fixture only.
func TestAgentCgroup(t *testing.T) {
	requireOffCPU(t)
	root := ""
	for _, r := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		if _, err := os.Stat(filepath.Join(r, "cgroup.procs")); err == nil {
			root = r
			break
		}
	}
	if root == "" || os.Geteuid() != 0 {
		t.Skip("needs root and a cgroup v2 hierarchy")
	}
	cpuPID, sleepPID := fixtures(t)
	dir := filepath.Join(root, "rewind-test-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot create a cgroup: %v", err)
	}
	defer os.Remove(dir)
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cpuPID)), 0o644); err != nil {
		t.Skipf("cannot move a process into a cgroup: %v", err)
	}
	defer func() {
		// Move it back so the directory can go.
		os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(strconv.Itoa(cpuPID)), 0o644)
	}()
	c := runFor(t, Config{Scope: perfevent.Scope{Cgroup: dir}}, 2500*time.Millisecond)
	cpu := c.pids(TypeCPU)
	if cpu[cpuPID] == 0 {
		t.Errorf("no CPU samples of the fixture in the cgroup: %v", cpu)
	}
	for pid := range cpu {
		if pid != cpuPID {
			t.Errorf("CPU samples of process %d outside the cgroup", pid)
		}
	}
	_ = sleepPID
}

// TestAgentChurn starts the CPU fixture after the agent (system-wide,
// --comm ^cpu$), both ways: from stack copies, the new process's exec
// and mappings come from the kernel's records; in the kernel (auto, where
// the BPF programs load), it is described when the program first meets
// it, and the host's other processes, out of --comm's scope, are not (on
// a loaded machine, loading their files delayed the fixture's past its
// life). Either way its frames are symbolized without a restart.
func TestAgentChurn(t *testing.T) {
	requireOffCPU(t)
	exe := perftestCPU(t)
	for _, mode := range []string{UnwindUser, UnwindAuto} {
		t.Run(mode, func(t *testing.T) {
			c := &collect{}
			ctx, stopAfter, cancel := runningFor(3 * time.Second)
			defer cancel()
			ready := make(chan struct{})
			cfg := Config{Comm: regexp.MustCompile(`^cpu$`), Period: time.Second, Freq: 99, Exporters: []Exporter{c}, UnwindIn: mode,
				Warn: func(s string) { t.Log("warning: " + s) }, Ready: func() { stopAfter(); close(ready) }}
			done := make(chan error, 1)
			go func() { done <- Run(ctx, cfg) }()
			<-ready
			cmd := start(t, exe, "2", "1")
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			checkChurn(t, c, cmd.Process.Pid)
		})
	}
}

// checkChurn asserts that 80% of pid's CPU samples have burn's frame.
func checkChurn(t *testing.T, c *collect, pid int) {
	t.Helper()
	var total, named int64
	for _, p := range c.got {
		if p.Type != TypeCPU {
			continue
		}
		for _, s := range p.Profile.Stacks {
			if s.PID != pid {
				continue
			}
			total += s.Value
			for _, l := range s.Locations {
				if l.Name() == "burn" {
					named += s.Value
					break
				}
			}
		}
	}
	if total > 0 && float64(named) >= 0.8*float64(total) {
		return
	}
	t.Errorf("the process started after the agent: %d of %d ns under a symbolized burn", named, total)
	for _, p := range c.got {
		for _, s := range p.Profile.Stacks {
			if s.PID != pid {
				continue
			}
			var names []string
			for _, l := range s.Locations {
				names = append(names, fmt.Sprintf("%s@%#x", l.Name(), l.Addr))
			}
			t.Logf("%s %d: %s", p.Type, s.Value, strings.Join(names, " <- "))
		}
	}
}

// gcc compiles a fixture, skipping without a C compiler.
func gcc(t *testing.T, args ...string) {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skipf("no C compiler: %v", err)
	}
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestAgentChurnInProcess profiles two processes by PID from before they
// change: one dlopens a library and burns CPU in it, the other (a shell)
// execs the CPU fixture; each exits after 2 s of that, within the agent's
// first period. Their frames are symbolized from the kernel's mmap and
// exec records, without a restart, once the processes are gone (the
// period is built after its end): the library's functions in the
// library's mapping, the new program's after the exec.
func TestAgentChurnInProcess(t *testing.T) {
	requireOffCPU(t)
	dir := t.TempDir()
	lib, dl := filepath.Join(dir, "libburn.so"), filepath.Join(dir, "dlopener")
	gcc(t, "-O2", "-g", "-fomit-frame-pointer", "-shared", "-fPIC", "-o", lib, "testdata/libburn.c")
	gcc(t, "-O2", "-g", "-o", dl, "testdata/dlopener.c", "-ldl")
	cpu := perftestCPU(t)
	dlCmd := exec.Command(dl, lib, "2")
	shCmd := exec.Command("sh", "-c", `read x; exec "$0" 2 0`, cpu)
	var mu sync.Mutex
	exited := map[int]time.Time{}
	var triggers []io.WriteCloser
	for _, cmd := range []*exec.Cmd{dlCmd, shCmd} {
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		triggers = append(triggers, in)
		go func(cmd *exec.Cmd) {
			err := cmd.Wait()
			mu.Lock()
			exited[cmd.Process.Pid] = time.Now()
			mu.Unlock()
			if err != nil {
				t.Errorf("%s: %v", cmd.Path, err)
			}
		}(cmd)
		t.Cleanup(func() { cmd.Process.Kill() })
	}
	c := &collect{}
	ctx, stopAfter, cancel := runningFor(4500 * time.Millisecond)
	defer cancel()
	ready := make(chan struct{})
	cfg := Config{Scope: perfevent.Scope{PIDs: []int{dlCmd.Process.Pid, shCmd.Process.Pid}}, Period: 3500 * time.Millisecond, Freq: 199,
		Exporters: []Exporter{c}, Warn: func(s string) { t.Log("warning: " + s) }, Ready: func() { stopAfter(); close(ready) }}
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	<-ready
	for _, in := range triggers {
		in.Write([]byte("go\n"))
		in.Close()
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, w := range []struct {
		pid      int
		fn, file string
		what     string
	}{
		{dlCmd.Process.Pid, "lib_spin", lib, "after dlopen"},
		{shCmd.Process.Pid, "hash_block", cpu, "after exec"},
	} {
		gone, ok := exited[w.pid]
		if !ok {
			t.Errorf("process %d (%s) did not exit before the agent stopped", w.pid, w.what)
			continue
		}
		var total, named, afterExit int64
		for _, p := range c.got {
			if p.Type != TypeCPU {
				continue
			}
			for _, s := range p.Profile.Stacks {
				if s.PID != w.pid {
					continue
				}
				total += s.Value
				for _, l := range s.Locations {
					if l.Mapping != nil && l.Mapping.Path == w.file && (l.Name() == w.fn || l.Name() == "lib_burn" || l.Name() == "burn") {
						named += s.Value
						if p.End.After(gone) {
							afterExit += s.Value
						}
						break
					}
				}
			}
		}
		t.Logf("process %d %s: %v sampled, %v symbolized in %s, %v of it in periods built after its exit", w.pid, w.what,
			time.Duration(total), time.Duration(named), filepath.Base(w.file), time.Duration(afterExit))
		if total == 0 || float64(named) < 0.9*float64(total) {
			t.Errorf("process %d %s: %d of %d ns in %s's functions, want nearly all", w.pid, w.what, named, total, filepath.Base(w.file))
		}
		if afterExit != named {
			t.Errorf("process %d %s: %v of %v symbolized in periods ending after its exit, want all (the test's timing)", w.pid, w.what, time.Duration(afterExit), time.Duration(named))
		}
	}
}

// TestAgentDefaultRate: without Freq the agent samples at 19 Hz per CPU,
// so every CPU sample stands for 1/19 s of CPU time.
func TestAgentDefaultRate(t *testing.T) {
	perftest.RequirePerfEvent(t)
	cpu := start(t, perftestCPU(t), "60", "0")
	c := &collect{}
	ctx, ready, cancel := runningFor(2500 * time.Millisecond)
	defer cancel()
	if err := Run(ctx, Config{Scope: perfevent.Scope{PIDs: []int{cpu.Process.Pid}}, Period: time.Second, Exporters: []Exporter{c},
		Warn: func(s string) { t.Log("warning: " + s) }, Ready: ready}); err != nil {
		t.Fatal(err)
	}
	var values []int64
	for _, p := range c.got {
		for _, s := range p.Profile.Stacks {
			// (Stacks counted in the kernel stand for Samples()
			// samples each.)
			for range s.Samples() {
				values = append(values, s.Value/s.Samples())
			}
		}
	}
	if len(values) < 3 {
		t.Fatalf("%d samples of a CPU-bound process in 2.5 s", len(values))
	}
	slices.Sort(values)
	want := int64(time.Second / 19)
	if med := values[len(values)/2]; med < want*98/100 || med > want*102/100 {
		t.Errorf("median sample value %v over %d samples, want 1/19 s (%v): 19 Hz", time.Duration(med), len(values), time.Duration(want))
	}
}

// TestAgentSlowBuild: when unwinding and symbolizing lag (a loaded host),
// the goroutine reading the ring buffers does not wait for them in the
// middle of a period: periods keep their length.
func TestAgentSlowBuild(t *testing.T) {
	perftest.RequirePerfEvent(t)
	defer func(e, l time.Duration) { partialEvery, partialLag, beforeBuild = e, l, nil }(partialEvery, partialLag)
	partialEvery, partialLag = 100*time.Millisecond, 50*time.Millisecond
	beforeBuild = func() { time.Sleep(700 * time.Millisecond) }
	cpu := start(t, perftestCPU(t), "60", "0")
	c := &collect{}
	ctx, ready, cancel := runningFor(4500 * time.Millisecond)
	defer cancel()
	var log strings.Builder
	if err := Run(ctx, Config{Scope: perfevent.Scope{PIDs: []int{cpu.Process.Pid}}, Freq: 99, Period: time.Second, Exporters: []Exporter{c},
		Log: &log, Warn: func(s string) { t.Log("warning: " + s) }, Ready: ready}); err != nil {
		t.Fatal(err)
	}
	t.Logf("progress:\n%s", log.String())
	if len(c.got) < 4 {
		t.Fatalf("%d periods in 4.5 s of 1 s periods", len(c.got))
	}
	for _, p := range c.got[:len(c.got)-1] {
		if d := p.End.Sub(p.Start); d > 1250*time.Millisecond {
			t.Errorf("period %d lasted %v, want 1 s (the pump waited for the builder)", p.Seq, d)
		}
	}
}
