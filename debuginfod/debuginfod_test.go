package debuginfod

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rewindstack/rewind/elfobj"
)

// server serves file under its build-id, counting requests; other
// build-ids get 404, and the id "bad" slot serves the wrong file.
func server(t *testing.T, file string) (url, id string, hits *atomic.Int32) {
	f, err := elfobj.Open(file)
	if err != nil {
		t.Skipf("no ELF file to serve: %v", err)
	}
	id = f.BuildIDHex()
	f.Close()
	if id == "" {
		t.Skipf("%s has no build-id", file)
	}
	hits = &atomic.Int32{}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		switch r.URL.Path {
		case "/buildid/" + id + "/executable", "/buildid/" + strings.Repeat("ab", 20) + "/executable":
			http.ServeFile(w, r, file)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s.URL, id, hits
}

func TestFetchCacheAndVerify(t *testing.T) {
	url, id, hits := server(t, "/bin/ls")
	cache := t.TempDir()
	c := &Client{URLs: []string{url}, CacheDir: cache, Timeout: 5 * time.Second}
	ctx := context.Background()
	p, err := c.Fetch(ctx, id, Executable)
	if err != nil {
		t.Fatal(err)
	}
	if p != filepath.Join(cache, id, "executable") {
		t.Errorf("path %s is not elfutils' layout", p)
	}
	// A second client finds it in the cache without asking.
	n := hits.Load()
	c2 := &Client{URLs: []string{url}, CacheDir: cache}
	if _, err := c2.Fetch(ctx, id, Executable); err != nil || hits.Load() != n {
		t.Errorf("cached fetch: %v, %d requests", err, hits.Load()-n)
	}
	// Offline: cache only.
	off := &Client{CacheDir: cache, Offline: true}
	if _, err := off.Fetch(ctx, id, Executable); err != nil {
		t.Errorf("offline, cached: %v", err)
	}
	if _, err := off.Fetch(ctx, id, DebugInfo); !errors.Is(err, ErrNotFound) {
		t.Errorf("offline, not cached: %v", err)
	}
	// A miss is cached: asked once, then answered from the cache.
	n = hits.Load()
	if _, err := c.Fetch(ctx, id, DebugInfo); !errors.Is(err, ErrNotFound) {
		t.Errorf("miss: %v", err)
	}
	c3 := &Client{URLs: []string{url}, CacheDir: cache}
	if _, err := c3.Fetch(ctx, id, DebugInfo); !errors.Is(err, ErrNotFound) || hits.Load() != n+1 {
		t.Errorf("cached miss: %v, %d requests", err, hits.Load()-n)
	}
	st, err := os.Stat(filepath.Join(cache, id, "debuginfo"))
	if err != nil || st.Size() != 0 || st.Mode().Perm() != 0 {
		t.Errorf("miss not recorded as an empty mode-000 file: %v %v", st, err)
	}
	// The server's file has another build-id: refused, not cached.
	wrong := strings.Repeat("ab", 20)
	if _, err := c.Fetch(ctx, wrong, Executable); err == nil || !strings.Contains(err.Error(), "wanted") {
		t.Errorf("wrong file accepted: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cache, wrong, "executable")); err == nil {
		t.Errorf("wrong file cached")
	}
	for _, bad := range []string{"", "../etc", "ABC", strings.Repeat("0", 200)} {
		if _, err := c.Fetch(ctx, bad, Executable); err == nil {
			t.Errorf("build-id %q accepted", bad)
		}
	}
}

func TestFromEnv(t *testing.T) {
	t.Setenv("DEBUGINFOD_URLS", "")
	if FromEnv(false) != nil {
		t.Error("client without servers")
	}
	t.Setenv("DEBUGINFOD_URLS", " http://a  http://b ")
	t.Setenv("DEBUGINFOD_TIMEOUT", "3")
	t.Setenv("DEBUGINFOD_CACHE_PATH", "/x")
	c := FromEnv(false)
	if c == nil || len(c.URLs) != 2 || c.Timeout != 3*time.Second || c.CacheDir != "/x" {
		t.Errorf("%+v", c)
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestProgressAndStall: a download over a second prints progress; one
// that stalls longer than the timeout is abandoned and the server is not
// asked again.
func TestProgressAndStall(t *testing.T) {
	file := "/bin/ls"
	id := ""
	if f, err := elfobj.Open(file); err == nil {
		id = f.BuildIDHex()
		f.Close()
	}
	if id == "" {
		t.Skip("/bin/ls has no build-id")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pause := make(chan time.Duration, 2)
	pause <- 1300 * time.Millisecond // slow but moving: progress
	pause <- 5 * time.Second         // stalled: timeout
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.Write(data[:len(data)/2])
		w.(http.Flusher).Flush()
		d := 5 * time.Second
		select {
		case d = <-pause:
		default:
		}
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
		w.Write(data[len(data)/2:])
	}))
	defer s.Close()
	var progress syncBuf
	c := &Client{URLs: []string{s.URL}, CacheDir: t.TempDir(), Timeout: 2 * time.Second, Progress: &progress}
	if _, err := c.Fetch(context.Background(), id, Executable); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(progress.String(), "downloading "+s.URL) {
		t.Errorf("no progress line for a 1.3 s download: %q", progress.String())
	}
	var warned []string
	c2 := &Client{URLs: []string{s.URL}, CacheDir: t.TempDir(), Timeout: time.Second, Warn: func(m string) { warned = append(warned, m) }}
	start := time.Now()
	res := c2.FetchAll(context.Background(), []Request{{id, Executable}, {id, DebugInfo}})
	if res[0].Err == nil || time.Since(start) > 4*time.Second {
		t.Errorf("stalled download: %v after %v", res[0].Err, time.Since(start))
	}
	if len(warned) != 1 {
		t.Errorf("want one warning about the stalled server, got %q", warned)
	}
}
