package agent

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/perfevent"
)

// collectorDir is the Go module of the test Collector.
const collectorDir = "../internal/otelcol-test"

// collectorExe returns the test Collector to run: the one $REWIND_COLLECTOR
// names (.ci/run builds it and sets it), else the one already in the
// cache. Building it takes minutes on an empty Go cache, longer than a
// package's share of `go test ./...`, so without either the test is left
// out, saying how to put it in.
func collectorExe(t *testing.T) string {
	t.Helper()
	if exe := os.Getenv(fixture.CollectorEnv); exe != "" {
		if _, err := os.Stat(exe); err != nil {
			t.Fatalf("$%s: %v", fixture.CollectorEnv, err)
		}
		return exe
	}
	exe, err := fixture.CollectorPath(collectorDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(exe); err != nil {
		t.Skipf("left out: the test Collector is not built; %s", fixture.CollectorHowTo)
	}
	return exe
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// collector is a running test Collector.
type collector struct {
	exe, config, out string
	grpc, http       string
	cmd              *exec.Cmd
	log              *os.File
}

func newCollector(t *testing.T) *collector {
	dir := t.TempDir()
	c := &collector{exe: collectorExe(t), config: filepath.Join(dir, "config.yaml"), out: filepath.Join(dir, "received.bin"),
		grpc: freePort(t), http: freePort(t)}
	cfg := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
      http:
        endpoint: %s
exporters:
  debug:
    verbosity: detailed
  profilefile:
    path: %s
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [otlp]
      exporters: [profilefile, debug]
`, c.grpc, c.http, c.out)
	if err := os.WriteFile(c.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	var err error
	if c.log, err = os.Create(filepath.Join(dir, "collector.log")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.stop()
		if t.Failed() {
			b, _ := os.ReadFile(c.log.Name())
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("collector log (end):\n%s", b)
		}
	})
	return c
}

func (c *collector) start(t *testing.T) {
	t.Helper()
	c.cmd = exec.Command(c.exe, "--config", "file:"+c.config, "--feature-gates=service.profilesSupport")
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, addr := range []string{c.grpc, c.http} {
		for {
			conn, err := net.Dial("tcp", addr)
			if err == nil {
				conn.Close()
				break
			}
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(c.log.Name())
				t.Fatalf("the Collector does not listen on %s: %v\n%s", addr, err, b)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// stop kills the Collector (SIGKILL: a crash, not a clean shutdown).
func (c *collector) stop() {
	if c.cmd != nil {
		c.cmd.Process.Kill()
		c.cmd.Wait()
		c.cmd = nil
	}
}

// received reads every request the Collector's profilefile exporter
// wrote.
func (c *collector) received(t *testing.T) []flatSample {
	t.Helper()
	b, err := os.ReadFile(c.out)
	if err != nil {
		t.Fatalf("the Collector wrote nothing: %v", err)
	}
	var out []flatSample
	for len(b) >= 4 {
		n := int(binary.LittleEndian.Uint32(b))
		if 4+n > len(b) {
			t.Fatalf("truncated record in %s", c.out)
		}
		req := pprofileotlp.NewExportRequest()
		if err := req.UnmarshalProto(b[4 : 4+n]); err != nil {
			t.Fatal(err)
		}
		out = append(out, flatten(req.Profiles())...)
		b = b[4+n:]
	}
	return out
}

// TestRealCollector runs the agent against a real OpenTelemetry Collector
// (otlp receiver with profiles, debug exporter, and an exporter writing
// what it received): both profile types arrive with the fixtures'
// functions on top and the same values as the local pprof of each
// period; a Collector killed and restarted mid-run loses no period that
// the agent's queue kept.
func TestRealCollector(t *testing.T) {
	requireOffCPU(t)
	col := newCollector(t)
	col.start(t)
	cpuPID, sleepPID := fixtures(t)

	// The HTTP path first: one hand-made period, to the path the issue
	// names (the Collector serves profiles at /v1development/profiles).
	h, err := NewHTTP("http://" + col.http + StableHTTPPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Export(context.Background(), testPeriod(TypeCPU)); err != nil {
		t.Fatalf("OTLP/HTTP to the Collector: %v", err)
	}

	g, err := NewGRPC(col.grpc)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	dir := t.TempDir()
	d, _ := NewDir(dir, 100, 19)
	const period = 2 * time.Second
	ctx, stopAfter, cancel := runningFor(9 * time.Second)
	defer cancel()
	ready := make(chan struct{})
	cfg := Config{Scope: perfevent.Scope{PIDs: []int{cpuPID, sleepPID}}, Freq: 99, Period: period, OffCPU: true,
		Exporters: []Exporter{g, d}, Log: testLog{t}, Warn: func(s string) { t.Log("warning: " + s) }, Ready: func() { stopAfter(); close(ready) }}
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	<-ready
	// Down from about 2.5 s to 5 s: the periods ending at 4 s (and maybe 2 s)
	// are sent when it is back.
	time.Sleep(2500 * time.Millisecond)
	col.stop()
	time.Sleep(2500 * time.Millisecond)
	col.start(t)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	var got []flatSample
	for _, s := range col.received(t) {
		if s.PID != 42 {
			got = append(got, s)
		}
	}
	if n := len(col.received(t)) - len(got); n != 2 {
		t.Errorf("the OTLP/HTTP period arrived as %d samples, want 2", n)
	}
	checkFixtures(t, got, cpuPID, sleepPID, period)

	periods := map[string]bool{}
	otlp := map[string]int64{}
	for _, s := range got {
		periods[fmt.Sprintf("%s %d", s.Type, s.Start)] = true
		otlp[fmt.Sprintf("%s %d %d", s.Type, s.Start, s.PID)] += s.Value
	}
	local := localTotals(t, dir)
	lost := 0
	for k, v := range local {
		switch o, ok := otlp[k]; {
		case !ok:
			lost++
			t.Logf("not received: %s", k)
		case o != v:
			t.Errorf("%s: the Collector got %d, the local pprof has %d", k, o, v)
		}
	}
	// The agent's queue held what was exported while the Collector was
	// down and sent it on reconnection: no period may be missing.
	if lost > 0 {
		t.Errorf("%d of %d (type, period, process) profiles never reached the Collector", lost, len(local))
	}
	if len(periods) < 8 {
		t.Errorf("%d (type, period) profiles received, want 2 types x 5 periods (4 full, 1 partial): %v", len(periods), periods)
	}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
