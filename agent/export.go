package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/rewindstack/rewind/internal/grpcunary"
	"github.com/rewindstack/rewind/internal/outfile"
)

// GRPC exports OTLP profiles to a Collector's gRPC endpoint (HOST:PORT,
// plaintext HTTP/2; put TLS in a local Collector).
type GRPC struct {
	addr   string
	client *grpcunary.Client
}

// ExportMethod is the gRPC method OTLP profiles are exported with.
const ExportMethod = "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"

// exportMetadata is the request metadata of ExportMethod: the version of
// the development profiles schema OTLP encodes (pdata's
// pprofileotlp.DevelopmentVersionHeader and DevelopmentVersion).
var exportMetadata = map[string]string{"otlp-profiles-development-version": "1"}

// NewGRPC returns an exporter to addr; it connects lazily.
func NewGRPC(addr string) (*GRPC, error) {
	c, err := grpcunary.New(addr)
	if err != nil {
		return nil, fmt.Errorf("otlp %s: %w", addr, err)
	}
	return &GRPC{addr: addr, client: c}, nil
}

// Name implements Exporter.
func (g *GRPC) Name() string { return "otlp grpc " + g.addr }

// Export implements Exporter. A failed call's error is a
// *grpcunary.Error naming its status code.
func (g *GRPC) Export(ctx context.Context, p *Period) error {
	resp, err := g.client.Invoke(ctx, ExportMethod, exportMetadata, OTLP(p))
	if err != nil {
		return err
	}
	return partialSuccess(resp)
}

// Close closes the connection.
func (g *GRPC) Close() error { return g.client.Close() }

// partialSuccess is the error of an ExportProfilesServiceResponse that
// reports rejected profiles (its partial_success, field 1:
// rejected_profiles 1, error_message 2), or of one that is not valid.
func partialSuccess(resp []byte) error {
	rejected, msg, err := decodeExportResponse(resp)
	if err != nil {
		return fmt.Errorf("export response: %w", err)
	}
	if rejected > 0 {
		return fmt.Errorf("collector rejected %d profiles: %s", rejected, msg)
	}
	return nil
}

// DefaultHTTPPath is where HTTP posts for a URL without a path: the
// OpenTelemetry Collector's otlp receiver takes profiles there while their
// protocol is in development.
const DefaultHTTPPath = "/v1development/profiles"

// StableHTTPPath is the path OTLP names for profiles once their protocol
// is stable, by analogy with /v1/traces.
const StableHTTPPath = "/v1/profiles"

// HTTP exports OTLP profiles as protobuf over HTTP: POST to the URL as
// given, or to DefaultHTTPPath on a URL without a path. The Collector
// serves profiles at DefaultHTTPPath only, and later versions may serve
// them at StableHTTPPath only: when the server answers 404 Not Found at
// one of the two, the other is tried, and the one that answers is kept.
type HTTP struct {
	client *http.Client

	mu  sync.Mutex
	url string // where the last successful post went, or the given URL
	alt string // the other of the two profiles paths; "" for another path
}

// NewHTTP returns an exporter posting to rawURL (see DefaultHTTPPath).
func NewHTTP(rawURL string) (*HTTP, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--otlp-http %q: want http://HOST:PORT[/v1/profiles]", rawURL)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = DefaultHTTPPath
	}
	h := &HTTP{url: u.String(), client: &http.Client{}}
	switch u.Path {
	case DefaultHTTPPath:
		u.Path = StableHTTPPath
		h.alt = u.String()
	case StableHTTPPath:
		u.Path = DefaultHTTPPath
		h.alt = u.String()
	}
	return h, nil
}

// Name implements Exporter.
func (h *HTTP) Name() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return "otlp http " + h.url
}

// URL is where the exporter posts now.
func (h *HTTP) URL() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.url
}

// Export implements Exporter.
func (h *HTTP) Export(ctx context.Context, p *Period) error {
	body := OTLP(p)
	h.mu.Lock()
	target, alt := h.url, h.alt
	h.mu.Unlock()
	err := h.post(ctx, target, body)
	if alt == "" || !errors.Is(err, errNotFound) {
		return err
	}
	if aerr := h.post(ctx, alt, body); aerr != nil {
		if errors.Is(aerr, errNotFound) {
			return fmt.Errorf("%w (and at %s)", err, alt)
		}
		return aerr
	}
	h.mu.Lock()
	h.url, h.alt = alt, target
	h.mu.Unlock()
	return nil
}

func (h *HTTP) post(ctx context.Context, target string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	return do(h.client, req)
}

// errNotFound wraps the error of a request answered 404 Not Found.
var errNotFound = errors.New("404 Not Found")

func do(c *http.Client, req *http.Request) error {
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("%s: %w: %s", req.URL, errNotFound, strings.TrimSpace(string(msg)))
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: %s: %s", req.URL, resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}

// Pyroscope pushes pprof profiles to Pyroscope's POST /ingest: query
// parameters name (APP.TYPE{host=..,pid=..,comm=..}), from, until (Unix
// seconds), format=pprof, sampleRate, spyName; the gzipped pprof in the
// multipart form field "profile". One request per process.
type Pyroscope struct {
	url    string
	app    string
	freq   int
	client *http.Client
}

// NewPyroscope returns an exporter to a Pyroscope server's base URL; app
// prefixes the application names (default "rewind").
func NewPyroscope(rawURL, app string, freq int) (*Pyroscope, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--pyroscope %q: want http://HOST:PORT", rawURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	if !strings.HasSuffix(u.Path, "/ingest") {
		u.Path += "/ingest"
	}
	if app == "" {
		app = "rewind"
	}
	return &Pyroscope{url: u.String(), app: app, freq: freq, client: &http.Client{}}, nil
}

// Name implements Exporter.
func (py *Pyroscope) Name() string { return "pyroscope " + py.url }

// Export implements Exporter.
func (py *Pyroscope) Export(ctx context.Context, p *Period) error {
	for _, pid := range sortedPIDs(p) {
		prof := p.Profile.Pprof(py.periodNS(p))
		keep := prof.Sample[:0]
		for _, s := range prof.Sample {
			if len(s.NumLabel["pid"]) == 1 && s.NumLabel["pid"][0] == int64(pid) {
				keep = append(keep, s)
			}
		}
		prof.Sample = keep
		if len(keep) == 0 {
			continue
		}
		var buf bytes.Buffer
		if err := prof.Write(&buf); err != nil {
			return err
		}
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		fw, err := mw.CreateFormFile("profile", "profile.pprof")
		if err != nil {
			return err
		}
		fw.Write(buf.Bytes())
		mw.Close()
		labels := []string{"host=" + labelValue(p.Host), "pid=" + strconv.Itoa(pid)}
		if info := p.Procs[pid]; info != nil && info.Comm != "" {
			labels = append(labels, "comm="+labelValue(info.Comm))
		}
		q := url.Values{}
		q.Set("name", py.app+"."+p.Type+"{"+strings.Join(labels, ",")+"}")
		q.Set("from", strconv.FormatInt(p.Start.Unix(), 10))
		q.Set("until", strconv.FormatInt(p.End.Unix(), 10))
		q.Set("format", "pprof")
		q.Set("sampleRate", strconv.Itoa(py.freq))
		q.Set("spyName", "rewind")
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, py.url+"?"+q.Encode(), &body)
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", mw.FormDataContentType())
		if err := do(py.client, req); err != nil {
			return err
		}
	}
	return nil
}

func (py *Pyroscope) periodNS(p *Period) int64 {
	if p.Type == TypeCPU && py.freq > 0 {
		return 1e9 / int64(py.freq)
	}
	return 0
}

// labelValue keeps a Pyroscope label value free of the name syntax's
// separators.
func labelValue(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '{', '}', ',', '=', '"', ' ':
			return '_'
		}
		return r
	}, s)
}

func sortedPIDs(p *Period) []int {
	seen := map[int]bool{}
	var out []int
	for _, s := range p.Profile.Stacks {
		if !seen[s.PID] {
			seen[s.PID] = true
			out = append(out, s.PID)
		}
	}
	sort.Ints(out)
	return out
}

// Dir writes every period as a gzipped pprof file
// DIR/rewind-TYPE-YYYYMMDDTHHMMSSZ.pb.gz and keeps the newest Keep files
// of each type (rotation).
type Dir struct {
	dir  string
	keep int
	freq int
}

// NewDir returns a file exporter into dir (created if missing).
func NewDir(dir string, keep, freq int) (*Dir, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("--out-dir: %w", err)
	}
	if keep <= 0 {
		keep = 60
	}
	return &Dir{dir: dir, keep: keep, freq: freq}, nil
}

// Name implements Exporter.
func (d *Dir) Name() string { return "out-dir " + d.dir }

// Export implements Exporter.
func (d *Dir) Export(_ context.Context, p *Period) error {
	periodNS := int64(0)
	if p.Type == TypeCPU && d.freq > 0 {
		periodNS = 1e9 / int64(d.freq)
	}
	prof := p.Profile.Pprof(periodNS)
	prof.TimeNanos = p.Start.UnixNano()
	prof.DurationNanos = int64(p.End.Sub(p.Start))
	name := fmt.Sprintf("rewind-%s-%s-%04d.pb.gz", p.Type, p.Start.UTC().Format("20060102T150405Z"), p.Seq%10000)
	// Readable by root only, as the agent has always made them: they
	// name every profiled process's functions.
	if err := outfile.Write(filepath.Join(d.dir, name), 0o600, prof.Write); err != nil {
		return err
	}
	return d.rotate(p.Type)
}

func (d *Dir) rotate(typ string) error {
	files, err := filepath.Glob(filepath.Join(d.dir, "rewind-"+typ+"-*.pb.gz"))
	if err != nil {
		return err
	}
	sort.Strings(files) // names sort by time
	for len(files) > d.keep {
		os.Remove(files[0])
		files = files[1:]
	}
	return nil
}
