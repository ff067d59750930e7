package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"

	"github.com/rewindstack/rewind/internal/testutil/perftest"
	"github.com/rewindstack/rewind/perfevent"
)

// TestPyroscopeRequest checks the push against Pyroscope's documented
// ingest API: POST /ingest?name=APP{labels}&from&until&format=pprof with
// the pprof in the multipart field "profile".
func TestPyroscopeRequest(t *testing.T) {
	var got []*http.Request
	var profs []*profile.Profile
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, _, err := r.FormFile("profile")
		if err != nil {
			t.Errorf("no profile form file: %v", err)
			http.Error(w, err.Error(), 400)
			return
		}
		p, err := profile.Parse(f)
		if err != nil {
			t.Errorf("profile field is not pprof: %v", err)
		}
		got, profs = append(got, r), append(profs, p)
	}))
	defer srv.Close()
	py, err := NewPyroscope(srv.URL, "", 19)
	if err != nil {
		t.Fatal(err)
	}
	if err := py.Export(context.Background(), testPeriod(TypeCPU)); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("%d requests, want 1 (one process)", len(got))
	}
	r := got[0]
	q := r.URL.Query()
	if r.Method != "POST" || r.URL.Path != "/ingest" {
		t.Errorf("%s %s, want POST /ingest", r.Method, r.URL.Path)
	}
	for k, v := range map[string]string{"name": "rewind.cpu{host=testhost,pid=42,comm=app}", "from": "1700000000", "until": "1700000060",
		"format": "pprof", "sampleRate": "19", "spyName": "rewind"} {
		if q.Get(k) != v {
			t.Errorf("query %s = %q, want %q", k, q.Get(k), v)
		}
	}
	var total int64
	for _, s := range profs[0].Sample {
		total += s.Value[1]
		if fn := s.Location[0].Line[0].Function.Name; fn != "work" && fn != "idle" {
			t.Errorf("leaf %q", fn)
		}
	}
	if total != 40 {
		t.Errorf("total cpu value %d, want 40", total)
	}
}

func TestHTTPExport(t *testing.T) {
	var body []byte
	var ctype, path string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ = io.ReadAll(r.Body)
		ctype, path = r.Header.Get("Content-Type"), r.URL.Path
	}))
	defer srv.Close()
	h, err := NewHTTP(srv.URL + "/v1/profiles")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Export(context.Background(), testPeriod(TypeOffCPU)); err != nil {
		t.Fatal(err)
	}
	if path != "/v1/profiles" || ctype != "application/x-protobuf" {
		t.Errorf("POST %s (%s), want /v1/profiles (application/x-protobuf)", path, ctype)
	}
	req := pprofileotlp.NewExportRequest()
	if err := req.UnmarshalProto(body); err != nil {
		t.Fatal(err)
	}
	if s := flatten(req.Profiles()); len(s) != 2 || s[0].Type != "off_cpu" {
		t.Errorf("received %+v", s)
	}
	if h, _ := NewHTTP(srv.URL); h.URL() != srv.URL+DefaultHTTPPath {
		t.Errorf("bare URL posts to %s, want %s", h.URL(), srv.URL+DefaultHTTPPath)
	}
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "nope", 503) }))
	defer bad.Close()
	h, _ = NewHTTP(bad.URL + "/v1/profiles")
	if err := h.Export(context.Background(), testPeriod(TypeCPU)); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("export to a failing server: %v, want the 503", err)
	}
}

// TestHTTPProfilesPath: the Collector serves profiles at
// /v1development/profiles only, a later one may serve /v1/profiles only;
// --otlp-http with either path (or none) reaches whichever the server has,
// and keeps posting there.
func TestHTTPProfilesPath(t *testing.T) {
	for _, served := range []string{DefaultHTTPPath, StableHTTPPath} {
		var mu sync.Mutex
		var paths []string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			paths = append(paths, r.URL.Path)
			mu.Unlock()
			if r.URL.Path != served {
				http.NotFound(w, r)
			}
		}))
		for _, given := range []string{"", "/", DefaultHTTPPath, StableHTTPPath} {
			paths = nil
			h, err := NewHTTP(srv.URL + given)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 2; i++ {
				if err := h.Export(context.Background(), testPeriod(TypeCPU)); err != nil {
					t.Errorf("server with %s, --otlp-http %q: %v", served, srv.URL+given, err)
				}
			}
			if h.URL() != srv.URL+served {
				t.Errorf("server with %s, --otlp-http %q: posts to %s", served, srv.URL+given, h.URL())
			}
			if last := paths[len(paths)-1]; last != served || len(paths) > 3 {
				t.Errorf("server with %s, --otlp-http %q: requests to %v, want the other path tried once at most", served, srv.URL+given, paths)
			}
		}
		srv.Close()
	}
	// Another path is used as given, and a 404 there is an error.
	none := httptest.NewServer(http.NotFoundHandler())
	defer none.Close()
	for _, given := range []string{"/otlp/profiles", StableHTTPPath} {
		h, _ := NewHTTP(none.URL + given)
		if err := h.Export(context.Background(), testPeriod(TypeCPU)); err == nil || !strings.Contains(err.Error(), "404") {
			t.Errorf("--otlp-http %q on a server without it: %v, want a 404 error", none.URL+given, err)
		}
	}
}

func TestDirRotation(t *testing.T) {
	dir := t.TempDir()
	d, err := NewDir(dir, 2, 19)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		p := testPeriod(TypeCPU)
		p.Start = p.Start.Add(time.Duration(i) * time.Minute)
		p.End = p.Start.Add(time.Minute)
		p.Seq = i
		if err := d.Export(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(files) != 2 || !strings.HasSuffix(files[0], "-0002.pb.gz") {
		t.Fatalf("files %q, want the newest 2", files)
	}
	f, _ := os.Open(files[1])
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	if p.DurationNanos != int64(time.Minute) || len(p.Sample) != 2 {
		t.Errorf("profile: duration %d, %d samples", p.DurationNanos, len(p.Sample))
	}
}

// flaky fails its first fails calls.
type flaky struct {
	mu    sync.Mutex
	fails int
	got   []int
	block chan struct{}
}

func (f *flaky) Name() string { return "flaky" }

func (f *flaky) Export(ctx context.Context, p *Period) error {
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fails > 0 {
		f.fails--
		return errors.New("backend down")
	}
	f.got = append(f.got, p.Seq)
	return nil
}

func TestQueueDropsOldestAndRetries(t *testing.T) {
	f := &flaky{fails: 3, block: make(chan struct{})}
	q := newQueue(f, 4, nil)
	q.minBackoff, q.maxBackoff = time.Millisecond, 4*time.Millisecond
	go q.run()
	start := time.Now()
	for i := 1; i <= 10; i++ {
		p := testPeriod(TypeCPU)
		p.Seq = i
		q.push(p) // never blocks, though the exporter does
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("pushing took %v", d)
	}
	_, dropped, _, depth := q.stats()
	if depth != 4 || dropped < 5 {
		t.Errorf("depth %d, dropped %d; want 4 and at least 5", depth, dropped)
	}
	close(f.block)
	q.close()
	q.wait(5 * time.Second)
	sent, dropped, failures, depth := q.stats()
	if failures != 3 || depth != 0 {
		t.Errorf("failures %d, depth %d; want 3, 0", failures, depth)
	}
	if sent+dropped != 10 {
		t.Errorf("sent %d + dropped %d != 10 pushed", sent, dropped)
	}
	// The newest periods survive, in order.
	if n := len(f.got); n == 0 || f.got[n-1] != 10 {
		t.Errorf("sent %v, want the newest ending with 10", f.got)
	}
	for i := 1; i < len(f.got); i++ {
		if f.got[i] <= f.got[i-1] {
			t.Errorf("sent out of order: %v", f.got)
		}
	}
}

// down is a backend that never answers: every export hangs until the
// queue gives up on it.
type down struct{ calls atomic.Int32 }

func (d *down) Name() string { return "down" }

func (d *down) Export(ctx context.Context, _ *Period) error {
	d.calls.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

// TestAgentBackendDown runs the agent with one backend that hangs and one
// that works: the working one gets every period, sampling goes on, the
// hung one's queue stays at its bound and counts the periods it dropped,
// and the agent still stops when told.
func TestAgentBackendDown(t *testing.T) {
	perftest.RequirePerfEvent(t)
	defer func(d time.Duration) { drainLimit = d }(drainLimit)
	drainLimit = 500 * time.Millisecond
	cpu := start(t, perftestCPU(t), "60", "0")
	good, bad := &collect{}, &down{}
	var log strings.Builder
	var warnings []string
	var wmu sync.Mutex
	warn := func(s string) {
		wmu.Lock()
		warnings = append(warnings, s)
		wmu.Unlock()
		t.Log("warning: " + s)
	}
	ctx, ready, cancel := runningFor(3 * time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Scope: perfevent.Scope{PIDs: []int{cpu.Process.Pid}}, Freq: 99, Period: 200 * time.Millisecond, QueueLen: 6,
			Exporters: []Exporter{bad, good}, Log: &log, Warn: warn, Ready: ready})
	}()
	select {
	case err := <-done:
		// Profiles left unsent make the run fail (the agent's exit
		// status), with their count.
		var ue *UnsentError
		if !errors.As(err, &ue) || ue.Unsent != 6 {
			t.Fatalf("Run returned %v, want an *UnsentError for 6 profiles", err)
		}
		// Only the exporter that failed lost profiles.
		if len(ue.Exporters) != 1 || ue.Exporters[0] != bad.Name() {
			t.Errorf("UnsentError names %q, want only %q", ue.Exporters, bad.Name())
		}
	case <-time.After(3*time.Second + drainLimit + 30*time.Second):
		t.Fatal("Run did not stop with a backend down")
	}
	wmu.Lock()
	for _, w := range warnings {
		if strings.Contains(w, "retrying") {
			t.Errorf("warning %q once the agent stopped: nothing is retried then", w)
		}
	}
	wmu.Unlock()
	t.Logf("progress:\n%s", log.String())
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		if strings.HasPrefix(l, "rewind agent: period ") {
			lines = append(lines, l)
		}
	}
	all := strings.Split(strings.TrimSpace(log.String()), "\n")
	stopped := all[len(all)-1]
	if len(lines) < 12 {
		t.Fatalf("%d progress lines in 3 s of 200 ms periods, want 15 or 16", len(lines))
	}
	good.mu.Lock()
	n, samples := len(good.got), 0
	for _, p := range good.got {
		samples += len(p.Profile.Stacks)
	}
	good.mu.Unlock()
	if n != len(lines) || samples == 0 {
		t.Errorf("the working backend got %d periods with %d stacks, want %d (one per progress line) with samples", n, samples, len(lines))
	}
	if bad.calls.Load() != 1 {
		t.Errorf("the hung backend was called %d times, want once (its first export never returned)", bad.calls.Load())
	}
	// The line after the stop: the working backend got everything, the
	// hung one nothing; its queue dropped all but the 6 it held.
	var periods, sent, dropped, failed, unsent int
	if _, err := fmt.Sscanf(stopped, "rewind agent: stopped after %d periods; profiles sent %d, dropped %d, failed sends %d, unsent %d",
		&periods, &sent, &dropped, &failed, &unsent); err != nil {
		t.Fatalf("last line %q: %v", stopped, err)
	}
	if periods != n || sent != n || unsent != 6 || dropped != n-6 {
		t.Errorf("last line %q: want %d periods, %[2]d sent, %d dropped, 6 unsent", stopped, n, n-6)
	}
}
