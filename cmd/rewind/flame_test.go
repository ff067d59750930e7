package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/perftest"
)

// TestRecordHTMLInChromium records the fixture into the default HTML flame
// graph and loads it in headless Chromium: the page renders (a screenshot
// with content) and its script, searching for hash_block from the URL
// fragment, finds it in most samples. The renderer's own browser tests
// (click to zoom, search, tooltips) live in package flamegraph.
func TestRecordHTMLInChromium(t *testing.T) {
	perftest.RequirePerfEvent(t)
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (apt-get install chromium)")
	}
	exe := perftest.BuildCPU(t, "-fomit-frame-pointer")
	dir := t.TempDir()
	wd, _ := os.Getwd()
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	// No -o: the default is an HTML flame graph in the current directory.
	if err := runRecord([]string{"-F", "499", "-q", "--", exe, "0.5", "1"}); err != nil {
		t.Fatal(err)
	}
	pages, _ := filepath.Glob(filepath.Join(dir, "rewind-*.html"))
	if len(pages) != 1 {
		t.Fatalf("default output: %v", pages)
	}
	html, err := os.ReadFile(pages[0])
	if err != nil {
		t.Fatal(err)
	}
	// The title names the command, not its arguments (issue 14).
	for _, want := range []string{"hash_block", "start_thread", "rewind record " + filepath.Base(exe)} {
		if !strings.Contains(string(html), want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
	shot := filepath.Join(dir, "shot.png")
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--window-size=1300,800", "--screenshot=" + shot, "file://" + pages[0]}
	// chromium's TMPDIR is the test's: it leaves directories there
	// (org.chromium.Chromium.*).
	env := append(os.Environ(), "TMPDIR="+t.TempDir())
	shotCmd := exec.Command(chromium, args...)
	shotCmd.Env = env
	if out, err := shotCmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, out)
	}
	if st, err := os.Stat(shot); err != nil || st.Size() < 10000 {
		t.Errorf("screenshot missing or empty: %v", err)
	}
	domCmd := exec.Command(chromium, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", "file://"+pages[0]+"#search=hash_block")
	domCmd.Env = env
	dom, err := domCmd.Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v", err)
	}
	// The page's script ran the search from the URL: it marks the share
	// of samples that match (hash_block is most of this program's time).
	m := regexp.MustCompile(`data-matched="([0-9.]+)"`).FindSubmatch(dom)
	if m == nil {
		t.Fatalf("the page's script did not run the search from #search=hash_block")
	}
	if pct, _ := strconv.ParseFloat(string(m[1]), 64); pct < 30 || pct > 100 {
		t.Errorf("hash_block matched %.1f%% of the samples, want most of them", pct)
	}
}
