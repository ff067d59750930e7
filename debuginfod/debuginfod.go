// Package debuginfod is a client for debuginfod servers (elfutils'
// protocol): it fetches executables and debug information by build-id
// from the servers named in DEBUGINFOD_URLS, keeps them in the same
// on-disk cache elfutils' client uses (so files fetched by gdb, eu-stack
// or perf are reused, and theirs are ours), verifies every download's
// build-id before use, and caches misses briefly.
package debuginfod

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rewindstack/rewind/elfobj"
)

// Kinds of artifact a server serves by build-id.
const (
	Executable = "executable"
	DebugInfo  = "debuginfo"
)

// ErrNotFound is returned (wrapped) when no server has the artifact, when
// a recent miss for it is cached, or when the client may not use the
// network.
var ErrNotFound = errors.New("not found")

// DefaultTimeout is the per-request timeout when DEBUGINFOD_TIMEOUT is
// unset (elfutils' default is 90 s; a dump should not wait that long).
const DefaultTimeout = 10 * time.Second

// DefaultMissTTL is how long a miss stays cached when the cache has no
// cache_miss_s file (elfutils' default, 600 s).
const DefaultMissTTL = 600 * time.Second

// maxDownload bounds one artifact's size.
const maxDownload = 4 << 30

// Client fetches artifacts by build-id. The zero value is unusable; use
// FromEnv or fill in URLs and CacheDir. A Client is safe for concurrent use.
type Client struct {
	// URLs are the servers' base URLs, tried in order.
	URLs []string
	// CacheDir is the elfutils-layout cache: DIR/BUILDID/executable,
	// DIR/BUILDID/debuginfo; an empty file there is a cached miss.
	CacheDir string
	// Timeout bounds connecting plus waiting for the first byte, and any
	// later pause in a download (as DEBUGINFOD_TIMEOUT does).
	Timeout time.Duration
	// MaxConns bounds concurrent downloads (default 4).
	MaxConns int
	// Offline uses the cache only and never touches the network.
	Offline bool
	// Progress, when not nil, receives a progress line for every download
	// that takes more than a second (os.Stderr in the command).
	Progress io.Writer
	// Warn, when not nil, receives one warning per server that fails
	// (unreachable, timing out, answering with errors).
	Warn func(string)

	once     sync.Once
	sem      chan struct{}
	hc       *http.Client
	mu       sync.Mutex
	inflight map[string]*call
	dead     map[string]error
}

type call struct {
	done chan struct{}
	path string
	err  error
}

// CacheDirFromEnv returns the cache directory elfutils' client uses:
// $DEBUGINFOD_CACHE_PATH, else ~/.debuginfod_client_cache when it exists
// (the legacy location), else $XDG_CACHE_HOME/debuginfod_client, else
// ~/.cache/debuginfod_client.
func CacheDirFromEnv() string {
	if d := os.Getenv("DEBUGINFOD_CACHE_PATH"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	if home != "" {
		if st, err := os.Stat(filepath.Join(home, ".debuginfod_client_cache")); err == nil && st.IsDir() {
			return filepath.Join(home, ".debuginfod_client_cache")
		}
	}
	if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
		return filepath.Join(x, "debuginfod_client")
	}
	if home == "" {
		return ""
	}
	return filepath.Join(home, ".cache", "debuginfod_client")
}

// FromEnv returns a client configured as elfutils' is: servers from
// DEBUGINFOD_URLS (space-separated), timeout from DEBUGINFOD_TIMEOUT
// (seconds), cache from CacheDirFromEnv. It returns nil when
// DEBUGINFOD_URLS names no server and offline is false; with offline the
// client answers from the cache alone.
func FromEnv(offline bool) *Client {
	urls := strings.Fields(os.Getenv("DEBUGINFOD_URLS"))
	if len(urls) == 0 && !offline {
		return nil
	}
	c := &Client{URLs: urls, CacheDir: CacheDirFromEnv(), Timeout: DefaultTimeout, Offline: offline}
	if s := os.Getenv("DEBUGINFOD_TIMEOUT"); s != "" {
		if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil && n > 0 {
			c.Timeout = time.Duration(n) * time.Second
		}
	}
	return c
}

func (c *Client) init() {
	c.once.Do(func() {
		n := c.MaxConns
		if n <= 0 {
			n = 4
		}
		c.sem = make(chan struct{}, n)
		t := c.timeout()
		c.hc = &http.Client{Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: t}).DialContext,
			ResponseHeaderTimeout: t,
			MaxConnsPerHost:       n,
			MaxIdleConnsPerHost:   n,
		}}
		c.inflight = map[string]*call{}
		c.dead = map[string]error{}
	})
}

func (c *Client) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return DefaultTimeout
}

// validID reports whether id is a build-id in lower-case hex.
func validID(id string) bool {
	if len(id) < 2 || len(id) > 128 || len(id)%2 != 0 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if !(id[i] >= '0' && id[i] <= '9' || id[i] >= 'a' && id[i] <= 'f') {
			return false
		}
	}
	return true
}

// Fetch returns the path of the cached artifact kind (Executable or
// DebugInfo) for the build-id id (lower-case hex), downloading it when
// the cache does not have it. The file's build-id has been checked. An
// error wrapping ErrNotFound means no server has it (or the miss is
// cached, or the client is offline); other errors say what failed.
func (c *Client) Fetch(ctx context.Context, id, kind string) (string, error) {
	c.init()
	id = strings.ToLower(id)
	if !validID(id) {
		return "", fmt.Errorf("debuginfod: %q is not a build-id", id)
	}
	if kind != Executable && kind != DebugInfo {
		return "", fmt.Errorf("debuginfod: unknown artifact kind %q", kind)
	}
	if c.CacheDir == "" {
		return "", errors.New("debuginfod: no cache directory (set DEBUGINFOD_CACHE_PATH or HOME)")
	}
	key := id + "/" + kind
	c.mu.Lock()
	if cl := c.inflight[key]; cl != nil {
		c.mu.Unlock()
		select {
		case <-cl.done:
			return cl.path, cl.err
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	cl := &call{done: make(chan struct{})}
	c.inflight[key] = cl
	c.mu.Unlock()
	cl.path, cl.err = c.fetch(ctx, id, kind)
	close(cl.done)
	return cl.path, cl.err
}

// Request names one artifact for FetchAll.
type Request struct{ ID, Kind string }

// Result is FetchAll's answer to one Request.
type Result struct {
	Path string
	Err  error
}

// FetchAll fetches the requests in parallel (at most MaxConns downloads
// at once) and returns their results in the same order.
func (c *Client) FetchAll(ctx context.Context, reqs []Request) []Result {
	out := make([]Result, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].Path, out[i].Err = c.Fetch(ctx, r.ID, r.Kind)
		}()
	}
	wg.Wait()
	return out
}

func (c *Client) missTTL() time.Duration {
	b, err := os.ReadFile(filepath.Join(c.CacheDir, "cache_miss_s"))
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n >= 0 {
			return time.Duration(n) * time.Second
		}
	}
	return DefaultMissTTL
}

// cached looks the artifact up in the cache: its path, or a cached miss.
func (c *Client) cached(path string) (string, bool, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return "", false, nil
	}
	if !st.Mode().IsRegular() {
		return "", true, fmt.Errorf("debuginfod: %s: not a regular file", path)
	}
	if st.Size() > 0 {
		return path, true, nil
	}
	// An empty file is a cached miss (elfutils writes it with mode 000).
	if time.Since(st.ModTime()) < c.missTTL() {
		return "", true, fmt.Errorf("debuginfod: %s: %w (miss cached)", filepath.Base(filepath.Dir(path)), ErrNotFound)
	}
	os.Remove(path)
	return "", false, nil
}

func (c *Client) fetch(ctx context.Context, id, kind string) (string, error) {
	path := filepath.Join(c.CacheDir, id, kind)
	if p, ok, err := c.cached(path); ok {
		if err == nil {
			if verr := verify(p, id); verr != nil {
				return "", verr
			}
		}
		return p, err
	}
	if c.Offline || len(c.URLs) == 0 {
		return "", fmt.Errorf("debuginfod: %s %s: %w (offline)", kind, id, ErrNotFound)
	}
	allMissed := true
	var errs []error
	for _, u := range c.URLs {
		c.mu.Lock()
		dead := c.dead[u]
		c.mu.Unlock()
		if dead != nil {
			errs = append(errs, dead)
			allMissed = false
			continue
		}
		p, err := c.download(ctx, u, id, kind, path)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, ErrNotFound) {
			allMissed = false
		}
		errs = append(errs, err)
	}
	if allMissed {
		c.cacheMiss(path)
	}
	return "", fmt.Errorf("debuginfod: %s %s: %w", kind, id, errors.Join(errs...))
}

// cacheMiss records a miss as elfutils does: an empty file of mode 000.
func (c *Client) cacheMiss(path string) {
	if os.MkdirAll(filepath.Dir(path), 0o755) != nil {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0)
	if err == nil {
		f.Close()
	}
}

// markDead stops using server u for the rest of the run, warning once.
func (c *Client) markDead(u string, err error) {
	c.mu.Lock()
	first := c.dead[u] == nil
	if first {
		c.dead[u] = err
	}
	c.mu.Unlock()
	if first && c.Warn != nil {
		c.Warn(fmt.Sprintf("%v (not asked again in this run)", err))
	}
}

// stallReader cancels a download that makes no progress for timeout.
type stallReader struct {
	r     io.Reader
	timer *time.Timer
	d     time.Duration
	n     int64
	mu    sync.Mutex
}

func (s *stallReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 {
		s.timer.Reset(s.d)
		s.mu.Lock()
		s.n += int64(n)
		s.mu.Unlock()
	}
	return n, err
}

func (s *stallReader) count() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

func (c *Client) download(ctx context.Context, base, id, kind, path string) (string, error) {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	defer func() { <-c.sem }()
	// A server found dead while this request waited for a connection
	// slot is not asked again: a down server costs one timeout, not one
	// per wave of requests.
	c.mu.Lock()
	dead := c.dead[base]
	c.mu.Unlock()
	if dead != nil {
		return "", dead
	}
	url := strings.TrimRight(base, "/") + "/buildid/" + id + "/" + kind
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		c.markDead(base, fmt.Errorf("debuginfod server %s: %v", base, err))
		return "", err
	}
	req.Header.Set("User-Agent", "rewind")
	start := time.Now()
	resp, err := c.hc.Do(req)
	if err != nil {
		err = fmt.Errorf("debuginfod server %s: %v", base, err)
		c.markDead(base, err)
		return "", err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return "", fmt.Errorf("%s: %w", url, ErrNotFound)
	case resp.StatusCode != http.StatusOK:
		err := fmt.Errorf("debuginfod server %s: %s: %s", base, url, resp.Status)
		if resp.StatusCode >= 500 {
			c.markDead(base, err)
		}
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", fmt.Errorf("debuginfod: cache: %v", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".rewind-"+kind+"-*")
	if err != nil {
		return "", fmt.Errorf("debuginfod: cache: %v", err)
	}
	defer os.Remove(tmp.Name())
	d := c.timeout()
	sr := &stallReader{r: io.LimitReader(resp.Body, maxDownload+1), d: d}
	sr.timer = time.AfterFunc(d, cancel)
	defer sr.timer.Stop()
	stopProgress := c.progress(url, start, sr, resp.ContentLength)
	n, cerr := io.Copy(tmp, sr)
	stopProgress()
	if err := tmp.Close(); cerr == nil {
		cerr = err
	}
	if cerr == nil && n > maxDownload {
		cerr = fmt.Errorf("larger than %d bytes", int64(maxDownload))
	}
	if cerr != nil {
		err := fmt.Errorf("debuginfod server %s: %s: %v", base, url, cerr)
		if ctx.Err() != nil {
			c.markDead(base, err)
		}
		return "", err
	}
	if err := verify(tmp.Name(), id); err != nil {
		return "", fmt.Errorf("%s: %v", url, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("debuginfod: cache: %v", err)
	}
	return path, nil
}

// progress prints a progress line every second after the first for a
// download in flight; the returned function ends it.
func (c *Client) progress(url string, start time.Time, sr *stallReader, total int64) func() {
	if c.Progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		printed := false
		for {
			select {
			case <-done:
				if printed {
					fmt.Fprintf(c.Progress, "rewind: debuginfod: %s: %d KiB in %.1fs\n", url, sr.count()>>10, time.Since(start).Seconds())
				}
				return
			case <-t.C:
				printed = true
				if total > 0 {
					fmt.Fprintf(c.Progress, "rewind: debuginfod: downloading %s: %d/%d KiB\n", url, sr.count()>>10, total>>10)
				} else {
					fmt.Fprintf(c.Progress, "rewind: debuginfod: downloading %s: %d KiB\n", url, sr.count()>>10)
				}
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// verify checks that the ELF file at path has the build-id id.
func verify(path, id string) error {
	f, err := elfobj.Open(path)
	if err != nil {
		return fmt.Errorf("debuginfod: %s: %v", path, err)
	}
	defer f.Close()
	if got := hex.EncodeToString(f.BuildID); got != id {
		return fmt.Errorf("debuginfod: %s: build-id %s, wanted %s (not used)", path, got, id)
	}
	return nil
}
