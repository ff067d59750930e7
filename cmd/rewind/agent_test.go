package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"golang.org/x/sys/unix"

	"github.com/rewindstack/rewind/agent"
	"github.com/rewindstack/rewind/internal/testutil/perftest"
	"github.com/rewindstack/rewind/perfevent"
)

// buildSleeper compiles the agent's sleeping fixture (main -> sleeper_wait
// -> sleeper_block -> nanosleep in a loop, no frame pointers).
func buildSleeper(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skipf("no C compiler: %v", err)
	}
	exe := filepath.Join(t.TempDir(), "sleeper")
	if out, err := exec.Command("gcc", "-O2", "-g", "-fomit-frame-pointer", "-o", exe, "../../agent/testdata/sleeper.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return exe
}

func requireSwitches(t *testing.T) {
	t.Helper()
	perftest.RequirePerfEvent(t)
	if _, err := perfevent.TracepointID("sched", "sched_switch"); err != nil {
		t.Skipf("off-CPU recording needs tracefs and root or CAP_PERFMON: %v", err)
	}
}

// TestRecordOffCPU records a program that sleeps in libc (built without
// frame pointers) with --off-cpu: its full stack is on top, and its
// blocked time adds up to the recording's length.
func TestRecordOffCPU(t *testing.T) {
	requireSwitches(t)
	exe := buildSleeper(t)
	out := filepath.Join(t.TempDir(), "off.pb.gz")
	_, stderr, code := run(t, "record", "--off-cpu", "-d", "1.5", "-o", out, "--", exe, "0.1")
	if code != 0 {
		t.Fatalf("record: exit %d\n%s", code, stderr)
	}
	m := regexp.MustCompile(`duration reached after ([\d.]+)s`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("record did not say how long it recorded:\n%s", stderr)
	}
	secs, _ := strconv.ParseFloat(m[1], 64)
	elapsed := time.Duration(secs * float64(time.Second))
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	if p.SampleType[1].Type != "off_cpu" {
		t.Errorf("sample type %s, want off_cpu", p.SampleType[1].Type)
	}
	var total, full int64
	for _, s := range p.Sample {
		var names []string
		for _, l := range s.Location {
			for _, ln := range l.Line {
				names = append(names, ln.Function.Name)
			}
		}
		total += s.Value[1]
		if strings.Contains(strings.Join(names, ";"), "sleeper_block;sleeper_wait;main") {
			full += s.Value[1]
		}
	}
	t.Logf("off CPU %v, %v of it with the full stack", time.Duration(total), time.Duration(full))
	// The blocked time is the recording's length (-d counts from a start
	// that comes later on a loaded machine, so the length is what record
	// says), most of it with the full stack (the first intervals may end
	// before the unwinder has loaded libc's rows).
	if total < int64(elapsed)*7/10 || total > int64(elapsed+150*time.Millisecond) || full < total/2 {
		t.Errorf("sleeper off CPU %v, %v of it with its full stack; want about the recording's %v, most with the full stack",
			time.Duration(total), time.Duration(full), elapsed)
	}
}

// TestAgentCLI runs rewind agent with the flags of issue 18 on two
// processes, stops it with SIGTERM mid-period, and checks the progress
// lines and the pprof files, the last one flushed at SIGTERM.
func TestAgentCLI(t *testing.T) {
	requireSwitches(t)
	sl := exec.Command(buildSleeper(t), "0.1")
	cpu := exec.Command(perftest.BuildCPU(t, "-fno-omit-frame-pointer"), "60", "1")
	for _, c := range []*exec.Cmd{sl, cpu} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		defer func(c *exec.Cmd) { c.Process.Kill(); c.Wait() }(c)
	}
	dir := t.TempDir()
	cmd := exec.Command(rewindBin, "agent", "-p", strconv.Itoa(sl.Process.Pid), "-p", strconv.Itoa(cpu.Process.Pid), "-F", "49",
		"--period", "1s", "--off-cpu", "--out-dir", dir, "--no-symbolize")
	var stderr strings.Builder
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// SIGTERM once two periods are out, however long the agent took to
	// start on a busy machine.
	sc := bufio.NewScanner(pipe)
	for periods := 0; periods < 2 && sc.Scan(); {
		stderr.WriteString(sc.Text() + "\n")
		if strings.HasPrefix(sc.Text(), "rewind agent: period ") {
			periods++
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	for sc.Scan() {
		stderr.WriteString(sc.Text() + "\n")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("rewind agent: %v\n%s", err, stderr.String())
	}
	t.Logf("stderr:\n%s", stderr.String())
	// 2 periods and the one SIGTERM ended; one more when a period ended
	// between the test reading the second line and the signal (their
	// lines come late on a loaded machine).
	n := strings.Count(stderr.String(), "rewind agent: period ")
	if n != 3 && n != 4 {
		t.Errorf("%d progress lines, want 3 (2 periods and the one SIGTERM ended)", n)
	}
	for _, typ := range []string{"cpu", "off_cpu"} {
		files, _ := filepath.Glob(filepath.Join(dir, "rewind-"+typ+"-*.pb.gz"))
		if len(files) != n {
			t.Errorf("%d %s files, want %d, one a period", len(files), typ, n)
			continue
		}
		f, _ := os.Open(files[1])
		p, err := profile.Parse(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Sample) == 0 {
			t.Errorf("%s: no samples", files[1])
		}
		// --no-symbolize: user frames are addresses in mappings with
		// build-ids and file offsets.
		for _, l := range p.Location {
			if l.Mapping != nil && l.Mapping.File != "[kernel.kallsyms]" {
				if len(l.Line) > 0 && l.Line[0].Function.Name != "" && !strings.HasPrefix(l.Line[0].Function.Name, "[unknown]") {
					t.Errorf("%s: user location named %q with --no-symbolize", typ, l.Line[0].Function.Name)
					break
				}
			}
		}
		ok := false
		for _, m := range p.Mapping {
			ok = ok || (m.BuildID != "" && m.File != "")
		}
		if !ok {
			t.Errorf("%s: no mapping with a build-id", typ)
		}
	}
}

// TestAgentDropsPrivileges checks, on a build without cgo (where Go can
// change every thread's credentials), that the agent keeps only
// CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH and CAP_SYSLOG on every thread once
// its events are open, with no_new_privs set.
func TestAgentDropsPrivileges(t *testing.T) {
	perftest.RequirePerfEvent(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: the test checks what root's agent keeps")
	}
	// rewindBin is built with CGO_ENABLED=0 (see TestMain).
	cmd := exec.Command(rewindBin, "agent", "-d", "3s", "--period", "1s", "--out-dir", t.TempDir())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	// The first period ends after the drop.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(stderr.String(), "period 1") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	tasks, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "task", "*", "status"))
	if len(tasks) == 0 {
		t.Fatalf("no threads; stderr:\n%s", stderr.String())
	}
	for _, st := range tasks {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		s := string(b)
		if !strings.Contains(s, "CapEff:\t0000000400080004") || !strings.Contains(s, "CapPrm:\t0000000400080004") || !strings.Contains(s, "NoNewPrivs:\t1") {
			t.Errorf("%s keeps more:\n%s", st, s[strings.Index(s, "CapInh"):])
		}
	}
}

func TestAgentFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"agent"}, "nowhere to send profiles"},
		{[]string{"agent", "-p", "x", "--out-dir", "/tmp"}, "bad process ID"},
		{[]string{"agent", "-p", "1", "--cgroup", "/", "--out-dir", "/tmp"}, "not both"},
		{[]string{"agent", "--cgroup", "no/such/cgroup", "--out-dir", "/tmp"}, "no such cgroup"},
		{[]string{"agent", "--comm", "(", "--out-dir", "/tmp"}, "--comm"},
		{[]string{"agent", "-F", "0", "--out-dir", "/tmp"}, "greater than 0"},
		{[]string{"agent", "--otlp-http", "ftp://x", "--out-dir", "/tmp"}, "want http://"},
		{[]string{"agent", "--pyroscope", "nohost"}, "want http://"},
	} {
		_, stderr, code := run(t, c.args...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("rewind %s: exit %d, stderr %q; want an error with %q", strings.Join(c.args, " "), code, stderr, c.want)
		}
	}
}

// TestAgentServiceUnit checks contrib/rewind-agent.service against the
// agent: its default arguments are valid rewind agent flags, it stops the
// agent with SIGTERM and leaves it time to flush (the queues get 10 s),
// its capability bounding set holds what the agent opens its events with
// and what it keeps, and systemd-analyze verify accepts it (where
// installed) with ExecStart on this build.
func TestAgentServiceUnit(t *testing.T) {
	b, err := os.ReadFile("../../contrib/rewind-agent.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	keys := map[string]string{}
	var args []string
	for _, line := range strings.Split(unit, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok || strings.HasPrefix(k, "#") {
			continue
		}
		if k == "Environment" && (strings.HasPrefix(v, `"REWIND_AGENT_ARGS=`) || strings.HasPrefix(v, "REWIND_AGENT_ARGS=")) {
			_, a, _ := strings.Cut(strings.Trim(v, `"`), "=")
			args = strings.Fields(strings.Trim(a, `"`))
			continue
		}
		keys[k] = v
	}
	if keys["ExecStart"] != "/usr/local/bin/rewind agent $REWIND_AGENT_ARGS" {
		t.Errorf("ExecStart=%s, want /usr/local/bin/rewind agent $REWIND_AGENT_ARGS (the README installs it there)", keys["ExecStart"])
	}
	if len(args) == 0 {
		t.Fatal("no default REWIND_AGENT_ARGS")
	}
	cfg, closeAll, limit, err := agentConfig(args)
	if err != nil {
		t.Fatalf("the unit's REWIND_AGENT_ARGS %q: %v", args, err)
	}
	closeAll()
	if len(cfg.Exporters) == 0 || limit != 0 || !cfg.DropPrivileges {
		t.Errorf("the unit's REWIND_AGENT_ARGS %q: %d exporters, -d %v, dropping privileges %v; want a destination, no end, the drop", args, len(cfg.Exporters), limit, cfg.DropPrivileges)
	}
	if keys["KillSignal"] != "SIGTERM" {
		t.Errorf("KillSignal=%s, want SIGTERM (the agent flushes on it)", keys["KillSignal"])
	}
	if d, err := time.ParseDuration(keys["TimeoutStopSec"]); err != nil || d <= 10*time.Second {
		t.Errorf("TimeoutStopSec=%s, want more than the 10 s the agent's queues get at the stop", keys["TimeoutStopSec"])
	}
	bounding := " " + keys["CapabilityBoundingSet"] + " "
	for _, c := range []string{"CAP_PERFMON", "CAP_SYS_ADMIN", "CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH", "CAP_SYSLOG"} {
		if !strings.Contains(bounding, " "+c+" ") {
			t.Errorf("CapabilityBoundingSet=%s lacks %s", keys["CapabilityBoundingSet"], c)
		}
	}
	names := map[int]string{unix.CAP_SYS_PTRACE: "CAP_SYS_PTRACE", unix.CAP_DAC_READ_SEARCH: "CAP_DAC_READ_SEARCH", unix.CAP_SYSLOG: "CAP_SYSLOG"}
	for _, c := range agent.KeptCapabilities {
		if names[c] == "" || !strings.Contains(bounding, " "+names[c]+" ") {
			t.Errorf("the agent keeps capability %d, which CapabilityBoundingSet=%s does not hold", c, keys["CapabilityBoundingSet"])
		}
	}
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Logf("systemd-analyze verify not run: %v", err)
		return
	}
	p := filepath.Join(t.TempDir(), "rewind-agent.service")
	if err := os.WriteFile(p, []byte(strings.ReplaceAll(unit, "/usr/local/bin/rewind", rewindBin)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(sa, "verify", p).CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestAgentFlags: every flag issue 18 names, with its exact spelling,
// reaches the agent's configuration.
func TestAgentFlags(t *testing.T) {
	dir := t.TempDir()
	cfg, closeAll, _, err := agentConfig([]string{"-p", "1", "-p", "2", "--comm", "^x$", "-F", "49", "--period", "5s", "--off-cpu",
		"--otlp", "127.0.0.1:1", "--otlp-http", "http://127.0.0.1:2/v1/profiles", "--pyroscope", "http://127.0.0.1:3", "--out-dir", dir, "--no-symbolize"})
	if err != nil {
		t.Fatal(err)
	}
	closeAll()
	var names []string
	for _, e := range cfg.Exporters {
		names = append(names, e.Name())
	}
	if fmt.Sprint(cfg.Scope.PIDs) != "[1 2]" || cfg.Comm.String() != "^x$" || cfg.Freq != 49 || cfg.Period != 5*time.Second || !cfg.OffCPU || !cfg.NoSymbolize ||
		strings.Join(names, ", ") != "otlp grpc 127.0.0.1:1, otlp http http://127.0.0.1:2/v1/profiles, pyroscope http://127.0.0.1:3/ingest, out-dir "+dir {
		t.Errorf("config: PIDs %v, comm %v, F %d, period %v, off-CPU %v, no-symbolize %v, exporters %q", cfg.Scope.PIDs, cfg.Comm, cfg.Freq, cfg.Period, cfg.OffCPU, cfg.NoSymbolize, names)
	}
	cfg, closeAll, _, err = agentConfig([]string{"--cgroup", "/sys/fs/cgroup", "--out-dir", dir})
	if err != nil {
		t.Fatal(err)
	}
	closeAll()
	if cfg.Scope.Cgroup != "/sys/fs/cgroup" || cfg.Freq != 19 || cfg.Period != time.Minute || cfg.OffCPU || cfg.NoSymbolize {
		t.Errorf("--cgroup /sys/fs/cgroup: cgroup %q, F %d, period %v, off-CPU %v, no-symbolize %v; want the defaults 19 Hz, 60 s, on-CPU, symbolized",
			cfg.Scope.Cgroup, cfg.Freq, cfg.Period, cfg.OffCPU, cfg.NoSymbolize)
	}
}
