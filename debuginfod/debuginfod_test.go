package debuginfod

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
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
