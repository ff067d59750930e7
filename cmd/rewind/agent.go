package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	"github.com/rewindstack/rewind/agent"
	"github.com/rewindstack/rewind/perfevent"
)

const agentHelp = `rewind agent [flags]   profile the host continuously

Samples every process of the host (or those chosen by -p, --cgroup,
--comm) at -F Hz per CPU with user stack copies, unwinds them with SFrame,
CFI and frame pointers per frame as rewind record does, and every --period
exports one CPU profile (and with --off-cpu one off-CPU profile: the time
threads spent blocked, by the stack they blocked in) to: an OpenTelemetry
Collector over OTLP gRPC (--otlp) or HTTP (--otlp-http), Pyroscope's
/ingest (--pyroscope), and/or rotated pprof files (--out-dir). A backend
that is down costs a bounded queue per exporter (oldest periods dropped,
counted), never sampling. One progress line per period goes to stderr.
SIGTERM or Ctrl-C exports the current period and exits.

Needs root or CAP_PERFMON (plus CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH to
read other users' mappings and files); see contrib/rewind-agent.service.`

// pidList is the repeatable -p flag.
type pidList []int

func (p *pidList) String() string { return fmt.Sprint([]int(*p)) }

func (p *pidList) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return fmt.Errorf("bad process ID %q", s)
	}
	*p = append(*p, n)
	return nil
}

func runAgent(args []string) error {
	surviveBrokenPipe()
	cfg, closeAll, limit, err := agentConfig(args)
	if err != nil {
		return err
	}
	defer closeAll()
	if os.Getenv("GOMEMLIMIT") == "" {
		// A long-running agent on a host with large binaries: collect
		// garbage harder as the heap nears this, rather than double it.
		debug.SetMemoryLimit(agentMemoryLimit)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if limit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}
	return agent.Run(ctx, cfg)
}

// agentConfig parses rewind agent's arguments into the agent's
// configuration with its exporters (closeAll closes them), and -d's
// duration (0: until a signal).
func agentConfig(args []string) (cfg agent.Config, closeAll func(), limit time.Duration, err error) {
	closeAll = func() {}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	fs := newFlags("agent", agentHelp)
	var pids pidList
	fs.Var(&pids, "p", "profile process `PID` (repeatable; default: every process)")
	cgroup := fs.String("cgroup", "", "profile only the tasks of cgroup `PATH` (a directory under /sys/fs/cgroup, or a path relative to it)")
	comm := fs.String("comm", "", "profile only processes or threads whose command name matches `REGEX`")
	freq := fs.Int("F", 19, "sampling frequency in `HZ` per CPU")
	period := &durationFlag{d: time.Minute}
	fs.Var(period, "period", "export every `DURATION` (default 60s)")
	offCPU := fs.Bool("off-cpu", false, "also record off-CPU profiles (sched_switch with stack copies; the value is the time blocked)")
	otlpAddr := fs.String("otlp", "", "send OTLP profiles over gRPC to `HOST:PORT` (an OpenTelemetry Collector)")
	otlpHTTP := fs.String("otlp-http", "", "send OTLP profiles over HTTP to `URL` (http://HOST:4318/v1/profiles)")
	pyro := fs.String("pyroscope", "", "push pprof profiles to the Pyroscope server at `URL` (POST /ingest)")
	outDir := fs.String("out-dir", "", "write every period's profiles as pprof files into `DIR`, keeping the newest --keep per type")
	keep := fs.Int("keep", 60, "pprof files of each type kept in --out-dir (`N`)")
	noSym := fs.Bool("no-symbolize", false, "export addresses, mapping file offsets and build-ids only: the backend symbolizes")
	stackSize := fs.Int("stack-size", 16<<10, "`BYTES` of user stack copied per sample")
	userOnly := fs.Bool("user-only", false, "do not record kernel frames")
	queueLen := fs.Int("queue", 16, "periods each exporter keeps while its backend is down (`N`); the oldest are dropped")
	dur := new(durationFlag)
	fs.Var(dur, "d", "stop after `DURATION` (default: until SIGTERM or Ctrl-C)")
	keepPrivs := fs.Bool("keep-privileges", false, "do not drop the capabilities the agent no longer needs once its events are open")
	noCache := fs.Bool("no-cache", false, "do not read or write the persistent caches ("+cacheDirHelp+")")
	unwindIn := unwindInFlag(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return cfg, closeAll, 0, err
	}
	if len(pos) > 0 {
		return cfg, closeAll, 0, fmt.Errorf("unexpected argument %q", pos[0])
	}
	if err := checkFreq(*freq); err != nil {
		return cfg, closeAll, 0, err
	}
	if err := checkUnwindIn(*unwindIn); err != nil {
		return cfg, closeAll, 0, err
	}
	cfg = agent.Config{UnwindIn: *unwindIn,
		Scope: perfevent.Scope{PIDs: pids}, Freq: *freq, Period: period.d, OffCPU: *offCPU, NoSymbolize: *noSym,
		StackSize: *stackSize, UserOnly: *userOnly, QueueLen: *queueLen, Log: os.Stderr, Warn: warn, CacheDir: cacheDir(*noCache), DropPrivileges: !*keepPrivs,
	}
	if *cgroup != "" {
		if len(pids) > 0 {
			return cfg, closeAll, 0, usagef("give -p or --cgroup, not both")
		}
		if cfg.Scope.Cgroup, err = cgroupDir(*cgroup); err != nil {
			return cfg, closeAll, 0, err
		}
	}
	if *comm != "" {
		if cfg.Comm, err = regexp.Compile(*comm); err != nil {
			return cfg, closeAll, 0, fmt.Errorf("--comm: %w", err)
		}
	}
	ex := agent.Destinations{OTLP: *otlpAddr, OTLPHTTP: *otlpHTTP, Pyroscope: *pyro, Dir: *outDir, Keep: *keep, Freq: *freq}
	if cfg.Exporters, closeAll, err = ex.Open(); err != nil {
		return cfg, func() {}, 0, err
	}
	if len(cfg.Exporters) == 0 {
		return cfg, closeAll, 0, fmt.Errorf("nowhere to send profiles: give --otlp, --otlp-http, --pyroscope or --out-dir")
	}
	if dur.set {
		limit = dur.d
	}
	return cfg, closeAll, limit, nil
}

// cgroupDir finds the directory of --cgroup's PATH: as given, or under
// /sys/fs/cgroup.
func cgroupDir(cgroup string) (string, error) {
	p := cgroup
	if p[0] != '/' || !dirExists(p) {
		p = "/sys/fs/cgroup/" + p
	}
	if !dirExists(p) {
		return "", fmt.Errorf("--cgroup %s: no such cgroup directory", cgroup)
	}
	return p, nil
}

// agentMemoryLimit is the agent's soft memory limit (the Go runtime's;
// GOMEMLIMIT overrides it).
const agentMemoryLimit = 160 << 20

func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
