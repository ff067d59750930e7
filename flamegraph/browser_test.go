package flamegraph

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The browser tests load generated pages in headless Chromium and drive
// them over the DevTools protocol (--remote-debugging-pipe: JSON messages
// separated by NUL bytes on file descriptors 3 and 4), so clicks, hovers
// and key presses are real input events, and screenshots are real pixels.

// chromium finds a Chromium binary, installing Debian's package when
// running as root with apt-get available; otherwise the test is skipped.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if _, err := exec.LookPath("apt-get"); err != nil || os.Geteuid() != 0 {
		t.Skip("chromium is not installed and cannot be installed here (needs root and apt-get): apt-get install -y chromium")
	}
	t.Log("chromium missing: apt-get update && apt-get install -y chromium")
	install := exec.Command("sh", "-c", "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium")
	if out, err := install.CombinedOutput(); err != nil {
		t.Skipf("chromium is not installed and installing it failed: %v\n%s", err, out)
	}
	p, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium still not found after apt-get install")
	}
	return p
}

// browser is one headless Chromium with a page attached.
type browser struct {
	t       *testing.T
	cmd     *exec.Cmd
	in      *os.File // our end of Chromium's fd 3
	out     *bufio.Reader
	next    int
	session string
}

func startBrowser(t *testing.T) *browser {
	t.Helper()
	bin := chromium(t)
	toChrome, chromeIn, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	chromeOut, fromChrome, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu",
		"--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
		"--disable-extensions", "--hide-scrollbars", "--remote-debugging-pipe",
		"--user-data-dir="+t.TempDir(), "--window-size=1280,800", "about:blank")
	cmd.ExtraFiles = []*os.File{toChrome, fromChrome} // fd 3: commands in, fd 4: replies out
	cmd.Env = chromiumEnv(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	toChrome.Close()
	fromChrome.Close()
	b := &browser{t: t, cmd: cmd, in: chromeIn, out: bufio.NewReaderSize(chromeOut, 1<<20)}
	t.Cleanup(func() {
		b.in.Close()
		chromeOut.Close()
		b.cmd.Process.Kill()
		b.cmd.Wait()
		if t.Failed() {
			t.Logf("chromium stderr:\n%s", stderr.String())
		}
	})
	var targets struct {
		TargetInfos []struct{ TargetID, Type string } `json:"targetInfos"`
	}
	b.call("", "Target.getTargets", nil, &targets)
	id := ""
	for _, ti := range targets.TargetInfos {
		if ti.Type == "page" {
			id = ti.TargetID
		}
	}
	if id == "" {
		var created struct{ TargetID string }
		b.call("", "Target.createTarget", map[string]any{"url": "about:blank"}, &created)
		id = created.TargetID
	}
	var att struct{ SessionID string }
	b.call("", "Target.attachToTarget", map[string]any{"targetId": id, "flatten": true}, &att)
	b.session = att.SessionID
	b.call(b.session, "Page.enable", nil, nil)
	return b
}

// call sends one command and waits for its reply, skipping events.
func (b *browser) call(session, method string, params any, result any) {
	b.t.Helper()
	b.next++
	msg := map[string]any{"id": b.next, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	data, _ := json.Marshal(msg)
	if _, err := b.in.Write(append(data, 0)); err != nil {
		b.t.Fatalf("%s: writing to chromium: %v", method, err)
	}
	deadline := time.AfterFunc(60*time.Second, func() { b.cmd.Process.Kill() })
	defer deadline.Stop()
	for {
		line, err := b.out.ReadBytes(0)
		if err != nil {
			b.t.Fatalf("%s: reading from chromium: %v", method, err)
		}
		var reply struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(line[:len(line)-1], &reply); err != nil {
			b.t.Fatalf("%s: bad reply %q: %v", method, line, err)
		}
		if reply.ID != b.next {
			continue // an event
		}
		if reply.Error != nil {
			b.t.Fatalf("%s: %s", method, reply.Error.Message)
		}
		if result != nil {
			if err := json.Unmarshal(reply.Result, result); err != nil {
				b.t.Fatalf("%s: decoding %s: %v", method, reply.Result, err)
			}
		}
		return
	}
}

// eval runs a JavaScript expression in the page and decodes its JSON
// value into v.
func (b *browser) eval(expr string, v any) {
	b.t.Helper()
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	b.call(b.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &r)
	if r.ExceptionDetails != nil {
		b.t.Fatalf("evaluating %s: %s %s", expr, r.ExceptionDetails.Text, r.ExceptionDetails.Exception.Description)
	}
	if v != nil {
		if err := json.Unmarshal(r.Result.Value, v); err != nil {
			b.t.Fatalf("evaluating %s: result %s: %v", expr, r.Result.Value, err)
		}
	}
}

// open navigates to a file and waits until the flame graph script has run.
func (b *browser) open(url string) {
	b.t.Helper()
	b.call(b.session, "Page.navigate", map[string]any{"url": url}, nil)
	for start := time.Now(); time.Since(start) < 30*time.Second; time.Sleep(50 * time.Millisecond) {
		var ready bool
		b.eval(`!!(document.getElementById("fg") && document.getElementById("fg").getAttribute("data-ready") === "1" && document.location.href === `+jsString(url)+`)`, &ready)
		if ready {
			return
		}
	}
	var state string
	b.eval(`document.readyState + " " + document.location.href + " " + (document.documentElement ? document.documentElement.outerHTML.slice(0, 400) : "")`, &state)
	b.t.Fatalf("%s: flame graph script did not finish (%s)", url, state)
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// mouse sends a real mouse event at page coordinates.
func (b *browser) mouse(typ string, x, y float64) {
	p := map[string]any{"type": typ, "x": x, "y": y}
	if typ != "mouseMoved" {
		p["button"] = "left"
		p["clickCount"] = 1
	}
	b.call(b.session, "Input.dispatchMouseEvent", p, nil)
}

func (b *browser) click(x, y float64) {
	b.mouse("mouseMoved", x, y)
	b.mouse("mousePressed", x, y)
	b.mouse("mouseReleased", x, y)
}

// frameBox is where a frame (found by name) is on screen.
type frameBox struct {
	ID      string
	X, Y, W float64
	Shown   bool
	Anc     bool
}

func (b *browser) frame(name string) frameBox {
	b.t.Helper()
	var raw struct {
		ID    string  `json:"id"`
		X     float64 `json:"x"`
		Y     float64 `json:"y"`
		W     float64 `json:"w"`
		Shown bool    `json:"shown"`
		Anc   bool    `json:"anc"`
	}
	b.eval(`(function(){
		var gs = document.querySelectorAll("g.f");
		for (var i = 0; i < gs.length; i++) {
			var t = gs[i].querySelector("title").textContent;
			if (t.slice(0, t.lastIndexOf("\n")) !== `+jsString(name)+`) continue;
			if (getComputedStyle(gs[i]).display !== "none") gs[i].scrollIntoView({block: "center", inline: "nearest"});
			var r = gs[i].querySelector("rect").getBoundingClientRect();
			return {id: gs[i].id, x: r.x + r.width / 2, y: r.y + r.height / 2, w: r.width,
				shown: getComputedStyle(gs[i]).display !== "none" && r.width > 0,
				anc: gs[i].classList.contains("anc")};
		}
		return {id: ""};
	})()`, &raw)
	if raw.ID == "" {
		b.t.Fatalf("no frame named %q in the page", name)
	}
	return frameBox{raw.ID, raw.X, raw.Y, raw.W, raw.Shown, raw.Anc}
}

// screenshot captures the viewport and checks it is a drawn flame graph:
// many distinct colours and a good share of non-white pixels.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	var shot struct{ Data string }
	b.call(b.session, "Page.captureScreenshot", map[string]any{"format": "png"}, &shot)
	data, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil {
		b.t.Fatal(err)
	}
	path := filepath.Join(b.t.TempDir(), name)
	if dir := os.Getenv("REWIND_SCREENSHOT_DIR"); dir != "" {
		path = filepath.Join(dir, name)
	}
	os.WriteFile(path, data, 0o644)
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		b.t.Fatalf("screenshot is not a PNG: %v", err)
	}
	colours, nonWhite, all := countColours(img)
	b.t.Logf("screenshot %s: %dx%d, %d colours, %.1f%% non-white", path, img.Bounds().Dx(), img.Bounds().Dy(), colours, 100*float64(nonWhite)/float64(all))
	if colours < 20 || float64(nonWhite) < 0.05*float64(all) {
		b.t.Errorf("screenshot looks blank: %d colours, %d of %d pixels non-white", colours, nonWhite, all)
	}
}

func countColours(img image.Image) (colours, nonWhite, all int) {
	seen := map[[3]uint32]bool{}
	r := img.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			seen[[3]uint32{cr >> 8, cg >> 8, cb >> 8}] = true
			if cr>>8 < 245 || cg>>8 < 245 || cb>>8 < 245 {
				nonWhite++
			}
			all++
		}
	}
	return len(seen), nonWhite, all
}

// browserProfile is a small profile with user, kernel and unknown frames
// and every hostile name.
func browserProfile() []Sample {
	s := []Sample{
		{[]string{"_start", "__libc_start_main", "main", "work", "compute"}, 500},
		{[]string{"_start", "__libc_start_main", "main", "work", "io_read"}, 200},
		{[]string{"_start", "__libc_start_main", "main", "setup"}, 100},
		{[]string{"clone3", "start_thread", "worker", "entry_SYSCALL_64 [k]", "do_syscall_64 [k]"}, 300},
		{[]string{"[unknown]", "[unknown]"}, 50},
	}
	for _, n := range hostileNames {
		s = append(s, Sample{Stack: []string{"_start", "__libc_start_main", "main", "hostile", n}, Value: 10})
	}
	return s
}

func writeFile(t *testing.T, name string, write func(*bytes.Buffer) error) string {
	t.Helper()
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return "file://" + path
}

// TestBrowserHTML loads the HTML page in Chromium: hostile names stay
// text, the screenshot is not blank, a real click zooms, hovering shows
// the tooltip, typing searches with the right matched share, Escape resets
// and a #zoom= fragment zooms on load.
func TestBrowserHTML(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	b := startBrowser(t)
	url := writeFile(t, "fg.html", func(w *bytes.Buffer) error {
		return WriteHTML(w, browserProfile(), Options{Title: "browser test", Subtitle: "rewind record -F 99"})
	})
	b.open(url)
	checkHostile(t, b)
	b.screenshot("fg-html.png")
	checkZoom(t, b)

	// Hover: the floating tooltip shows name, value and percentage.
	c := b.frame("compute")
	b.mouse("mouseMoved", c.X, c.Y)
	var tip string
	b.eval(`getComputedStyle(document.getElementById("fg-tip")).display === "block" ? document.getElementById("fg-tip").textContent : ""`, &tip)
	total := 500 + 200 + 100 + 300 + 50 + 10*len(hostileNames)
	want := fmt.Sprintf("compute\n500 samples, %.2f%% of all", 100*500.0/float64(total))
	if !strings.HasPrefix(tip, want) {
		t.Errorf("tooltip %q, want it to start with %q", tip, want)
	}

	// Search by typing: "o" would match too much; "_read" matches only
	// io_read, "start" matches _start, __libc_start_main, start_thread
	// (nested matches counted once).
	b.eval(`document.getElementById("fg-search-input").focus(), true`, nil)
	b.call(b.session, "Input.insertText", map[string]any{"text": "start"}, nil)
	var matched string
	b.eval(`document.getElementById("fg").getAttribute("data-matched")`, &matched)
	wantPct := fmt.Sprintf("%.2f", 100*float64(total-50)/float64(total))
	if matched != wantPct {
		t.Errorf("search \"start\" matched %s%%, want %s%%", matched, wantPct)
	}
	var magenta int
	b.eval(`Array.from(document.querySelectorAll("g.f rect")).filter(function(r){return r.getAttribute("fill")==="rgb(230,0,230)"}).length`, &magenta)
	if magenta != 3 {
		t.Errorf("%d frames highlighted for \"start\", want 3", magenta)
	}

	// Escape resets zoom and search.
	b.call(b.session, "Input.dispatchKeyEvent", map[string]any{"type": "keyDown", "key": "Escape", "code": "Escape", "windowsVirtualKeyCode": 27}, nil)
	var state struct{ Zoom, Matched string }
	b.eval(`({Zoom: document.getElementById("fg").getAttribute("data-zoom"), Matched: document.getElementById("fg").getAttribute("data-matched")})`, &state)
	if state.Zoom != "" || state.Matched != "" {
		t.Errorf("after Escape: zoom %q matched %q, want both empty", state.Zoom, state.Matched)
	}
	if f := b.frame("worker"); !f.Shown {
		t.Error("after Escape, frame worker is still hidden")
	}

	// A fragment zooms on load.
	work := b.frame("work")
	b.open(url + "#zoom=" + work.ID + "&search=comp")
	if f := b.frame("worker"); f.Shown {
		t.Error("#zoom=work: frame worker is shown")
	}
	b.eval(`document.getElementById("fg").getAttribute("data-matched")`, &matched)
	if want := fmt.Sprintf("%.2f", 100*500.0/float64(total)); matched != want {
		t.Errorf("#search=comp matched %s%%, want %s%%", matched, want)
	}
	// A regular expression: compute and io_read, 700 samples.
	// (A query string makes it a new document, not a same-page jump.)
	b.open(url + "?regexp#search=" + strings.ReplaceAll("/^COMP|^io_/i", "|", "%7C"))
	b.eval(`document.getElementById("fg").getAttribute("data-matched")`, &matched)
	if want := fmt.Sprintf("%.2f", 100*700.0/float64(total)); matched != want {
		t.Errorf("#search=/^COMP|^io_/i matched %s%%, want %s%%", matched, want)
	}
}

// TestBrowserSVG loads the standalone SVG document: it must parse as XML
// in the browser, keep hostile names as text, and zoom on a real click.
func TestBrowserSVG(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	b := startBrowser(t)
	url := writeFile(t, "fg.svg", func(w *bytes.Buffer) error {
		return WriteSVG(w, browserProfile(), Options{Title: "browser test"})
	})
	b.open(url)
	var errs int
	b.eval(`document.getElementsByTagName("parsererror").length`, &errs)
	if errs != 0 {
		t.Fatal("Chromium reports an XML parse error in the SVG")
	}
	checkHostile(t, b)
	b.screenshot("fg-svg.png")
	checkZoom(t, b)
}

// checkHostile checks in the live DOM that no hostile name became markup
// or ran, and that each is shown as its exact (display) text.
func checkHostile(t *testing.T, b *browser) {
	t.Helper()
	var dom struct {
		Pwned   bool     `json:"pwned"`
		Scripts int      `json:"scripts"`
		Foreign int      `json:"foreign"`
		Titles  []string `json:"titles"`
	}
	b.eval(`({pwned: window.pwned !== undefined,
		scripts: document.getElementsByTagName("script").length,
		foreign: document.querySelectorAll("img, iframe, svg svg, foreignObject").length,
		titles: Array.from(document.querySelectorAll("g.f > title")).map(function (t) {
			return t.textContent.slice(0, t.textContent.lastIndexOf("\n"));
		})})`, &dom)
	if dom.Pwned || dom.Scripts != 1 || dom.Foreign != 0 {
		t.Errorf("hostile names changed the document: pwned=%v scripts=%d injected elements=%d", dom.Pwned, dom.Scripts, dom.Foreign)
	}
	have := map[string]bool{}
	for _, s := range dom.Titles {
		have[s] = true
	}
	for _, n := range hostileNames {
		if !have[displayName(n)] {
			t.Errorf("no frame shows %q as text", displayName(n))
		}
	}
}

// checkZoom clicks the frame "work" with real mouse events and checks the
// view zoomed: work spans the width, its ancestors are marked, frames
// outside it are hidden; clicking "all" resets.
func checkZoom(t *testing.T, b *browser) {
	t.Helper()
	before := b.frame("work")
	if !b.frame("worker").Shown {
		t.Fatal("frame worker hidden before zooming")
	}
	b.click(before.X, before.Y)
	var zoom string
	b.eval(`document.getElementById("fg").getAttribute("data-zoom")`, &zoom)
	if zoom != before.ID {
		t.Fatalf("after clicking work (%s): data-zoom=%q", before.ID, zoom)
	}
	after := b.frame("work")
	full := b.frame("all")
	if after.W < 0.99*full.W || after.W < 1.2*before.W {
		t.Errorf("work is %.1f px wide after zoom (was %.1f, full %.1f)", after.W, before.W, full.W)
	}
	if b.frame("worker").Shown {
		t.Error("frame worker (outside work) still shown after zoom")
	}
	if m := b.frame("main"); !m.Shown || !m.Anc {
		t.Errorf("ancestor main: shown=%v marked=%v", m.Shown, m.Anc)
	}
	if c := b.frame("compute"); !c.Shown || c.W <= before.W*500/700*0.99 {
		t.Errorf("child compute: shown=%v width %.1f", c.Shown, c.W)
	}
	b.click(full.X, full.Y)
	b.eval(`document.getElementById("fg").getAttribute("data-zoom")`, &zoom)
	if zoom != "" || !b.frame("worker").Shown {
		t.Errorf("clicking all did not reset the zoom (data-zoom=%q)", zoom)
	}
}

// TestBrowserLarge loads the 10^6-sample, 10^5-distinct-stack graph of the
// benchmarks and zooms it with a real click, logging how long Chromium
// takes for each.
func TestBrowserLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	b := startBrowser(t)
	samples := manyStacks(1_000_000, 100_000)
	var size int
	url := writeFile(t, "large.html", func(w *bytes.Buffer) error {
		err := WriteHTML(w, samples, Options{Title: "large"})
		size = w.Len()
		return err
	})
	start := time.Now()
	b.open(url)
	load := time.Since(start)
	var n int
	b.eval(`document.querySelectorAll("g.f").length`, &n)
	b.screenshot("fg-large.png")
	// Zoom into the widest child of main.
	var name string
	b.eval(`(function(){
		var best = null, bv = -1;
		document.querySelectorAll("g.f[data-d='4']").forEach(function (g) {
			if (+g.getAttribute("data-v") > bv) { bv = +g.getAttribute("data-v"); best = g; }
		});
		var t = best.querySelector("title").textContent;
		return t.slice(0, t.lastIndexOf("\n"));
	})()`, &name)
	target := b.frame(name)
	start = time.Now()
	b.click(target.X, target.Y)
	var zoom string
	b.eval(`document.getElementById("fg").getAttribute("data-zoom")`, &zoom)
	click := time.Since(start)
	if zoom == "" {
		t.Errorf("clicking %s did not zoom", name)
	}
	t.Logf("%d bytes, %d frames drawn: load+script %v, click-to-zoom %v", size, n, load.Round(time.Millisecond), click.Round(time.Millisecond))
}

// TestBrowserScreenshotFlag takes the screenshot the plain way, with
// Chromium's own --screenshot flag (no DevTools), and checks it is drawn.
func TestBrowserScreenshotFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	bin := chromium(t)
	url := writeFile(t, "fg.html", func(w *bytes.Buffer) error {
		return WriteHTML(w, browserProfile(), Options{Title: "screenshot flag"})
	})
	png1 := filepath.Join(t.TempDir(), "shot.png")
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--user-data-dir="+t.TempDir(), "--hide-scrollbars", "--window-size=1280,600", "--screenshot="+png1, url)
	cmd.Env = chromiumEnv(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s --screenshot: %v\n%s", bin, err, out)
	}
	data, err := os.ReadFile(png1)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	colours, nonWhite, all := countColours(img)
	if colours < 20 || float64(nonWhite) < 0.05*float64(all) {
		t.Errorf("screenshot looks blank: %d colours, %d of %d pixels non-white", colours, nonWhite, all)
	}
}

// tallProfile is shaped like a Python profile that made a 3,264 px graph:
// a heavy shallow part (a request handler) beside three one-sample stacks
// 198 frames deep (a recursive visitor). Every frame name is unique so the
// tests can find frames by name.
func tallProfile() []Sample {
	s := []Sample{
		{[]string{"<module> (app.py:1)", "main (app.py:40)", "serve (server.py:88)", "handle (server.py:120)", "parse (parser.py:10)"}, 60},
		{[]string{"<module> (app.py:1)", "main (app.py:40)", "serve (server.py:88)", "handle (server.py:120)", "render (views.py:33)"}, 30},
		{[]string{"<module> (app.py:1)", "main (app.py:40)", "load_config (config.py:5)"}, 20},
	}
	for k := 0; k < 3; k++ {
		st := []string{"<module> (app.py:1)", "main (app.py:40)", "run (visitor.py:12)"}
		for len(st) < 198 {
			st = append(st, fmt.Sprintf("visit_%c%d (ast.py:%d)", 'a'+k, len(st), 100+len(st)))
		}
		s = append(s, Sample{Stack: st, Value: 1})
	}
	return s
}

// placement is where a frame is relative to the window, without scrolling.
type placement struct {
	ID           string  `json:"id"`
	X            float64 `json:"x"` // centre
	Top          float64 `json:"top"`
	Bottom       float64 `json:"bottom"`
	Inner        float64 `json:"inner"`
	Hit          bool    `json:"hit"`
	Shown        bool    `json:"shown"`
	ScrollY      float64 `json:"scrollY"`
	ScrollHeight float64 `json:"scrollHeight"`
}

// inView reports whether the frame is drawn wholly inside the window and
// is what the user sees at its centre (not covered by anything).
func (p placement) inView() bool {
	return p.Shown && p.Hit && p.Top >= -0.5 && p.Bottom <= p.Inner+0.5
}

func (p placement) String() string {
	return fmt.Sprintf("%s at %.0f..%.0f px in a %.0f px window (scrollY %.0f of %.0f, visible at its centre: %v, shown: %v)",
		p.ID, p.Top, p.Bottom, p.Inner, p.ScrollY, p.ScrollHeight, p.Hit, p.Shown)
}

// where finds a frame by name and says where it is on screen, leaving the
// scroll position alone.
func (b *browser) where(name string) placement {
	b.t.Helper()
	var p placement
	b.eval(`(function(){
		var gs = document.querySelectorAll("g.f");
		for (var i = 0; i < gs.length; i++) {
			var t = gs[i].querySelector("title").textContent;
			if (t.slice(0, t.lastIndexOf("\n")) !== `+jsString(name)+`) continue;
			var rect = gs[i].querySelector("rect");
			var r = rect.getBoundingClientRect();
			var shown = getComputedStyle(gs[i]).display !== "none" && r.width > 0;
			var at = shown ? document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2) : null;
			var se = document.scrollingElement || document.documentElement;
			return {id: gs[i].id, x: r.x + r.width / 2, top: r.top, bottom: r.bottom, inner: window.innerHeight,
				hit: at === rect, shown: shown, scrollY: window.scrollY, scrollHeight: se.scrollHeight};
		}
		return {id: ""};
	})()`, &p)
	if p.ID == "" {
		b.t.Fatalf("no frame named %q in the page", name)
	}
	return p
}

// waitZoom waits until the page has zoomed to the frame id (a fragment
// change is handled by an event that may run after the navigation call
// returns).
func (b *browser) waitZoom(id string) {
	b.t.Helper()
	var zoom string
	for start := time.Now(); time.Since(start) < 30*time.Second; time.Sleep(20 * time.Millisecond) {
		b.eval(`document.getElementById("fg").getAttribute("data-zoom")`, &zoom)
		if zoom == id {
			return
		}
	}
	b.t.Fatalf("the page did not zoom to %s (data-zoom=%q)", id, zoom)
}

// checkTallView loads a tall graph (HTML or SVG) in a 1280x800 window and
// checks the heavy part is in view at load, and that zooming brings the
// zoomed frame into view: by a real click on a frame seen at load, by a
// click on a deep frame, by a #zoom= link, and Escape brings the root back.
func checkTallView(t *testing.T, b *browser, url, shot string) {
	t.Helper()
	const (
		root    = "all"
		heavy   = "serve (server.py:88)"
		leaf    = "parse (parser.py:10)"
		run     = "run (visitor.py:12)"
		runKid  = "visit_a3 (ast.py:103)"
		deep    = "visit_b120 (ast.py:220)"
		deepKid = "visit_b121 (ast.py:221)"
		deeper  = "visit_c150 (ast.py:250)"
	)
	b.open(url)
	var height float64
	b.eval(`document.getElementById("fg").getBoundingClientRect().height`, &height)
	if height < 2*800 {
		t.Fatalf("the graph is %.0f px tall, not taller than two windows: the test profile is wrong", height)
	}
	for _, name := range []string{root, heavy, leaf, run} {
		if p := b.where(name); !p.inView() {
			t.Errorf("at load, %s is not in view: %v", name, p)
		}
	}
	// The HTML page's search box stays at the top of the window.
	var searchVisible bool
	b.eval(`(function(){
		var el = document.getElementById("fg-search-input");
		if (!el) return true;
		var r = el.getBoundingClientRect();
		return r.top >= 0 && r.bottom <= window.innerHeight && document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2) === el;
	})()`, &searchVisible)
	if !searchVisible {
		t.Error("at load, the search box is not in view")
	}
	b.screenshot(shot)

	// A click on a frame seen at load keeps it in view, with its child.
	// (If it is not in view, which failed above, bring it there to go on.)
	p := b.where(run)
	if !p.inView() {
		b.frame(run)
		p = b.where(run)
	}
	b.click(p.X, (p.Top+p.Bottom)/2)
	var zoom string
	b.eval(`document.getElementById("fg").getAttribute("data-zoom")`, &zoom)
	if zoom != p.ID {
		t.Fatalf("clicking %s (%s) zoomed to %q", run, p.ID, zoom)
	}
	for _, name := range []string{run, runKid} {
		if p := b.where(name); !p.inView() {
			t.Errorf("after zooming into %s, %s is not in view: %v", run, name, p)
		}
	}

	// Scroll up to a deep frame and click it: it stays in view, and so
	// does its child above it.
	d := b.frame(deep) // scrolls it to the middle of the window
	b.click(d.X, d.Y)
	b.eval(`document.getElementById("fg").getAttribute("data-zoom")`, &zoom)
	if zoom != d.ID {
		t.Fatalf("clicking %s (%s) zoomed to %q", deep, d.ID, zoom)
	}
	for _, name := range []string{deep, deepKid} {
		if p := b.where(name); !p.inView() {
			t.Errorf("after zooming into %s, %s is not in view: %v", deep, name, p)
		}
	}
	b.screenshot(strings.Replace(shot, ".png", "-deep.png", 1))

	// Escape resets the zoom and brings the root back into view.
	b.call(b.session, "Input.dispatchKeyEvent", map[string]any{"type": "keyDown", "key": "Escape", "code": "Escape", "windowsVirtualKeyCode": 27}, nil)
	for _, name := range []string{root, heavy} {
		if p := b.where(name); !p.inView() {
			t.Errorf("after Escape, %s is not in view: %v", name, p)
		}
	}

	// A link to a zoomed view opens on the zoomed frame, in a new
	// document (a query string) and on a fragment change.
	deeperID, leafID := b.where(deeper).ID, b.where(leaf).ID
	b.open(url + "?new#zoom=" + deeperID)
	b.waitZoom(deeperID)
	if p := b.where(deeper); !p.inView() {
		t.Errorf("opening #zoom=%s, %s is not in view: %v", deeperID, deeper, p)
	}
	b.screenshot(strings.Replace(shot, ".png", "-link.png", 1))
	b.open(url + "?new#zoom=" + leafID)
	b.waitZoom(leafID)
	if p := b.where(leaf); !p.inView() {
		t.Errorf("changing the fragment to #zoom=%s, %s is not in view: %v", leafID, leaf, p)
	}
	b.open(url + "?new#zoom=" + deeperID)
	b.waitZoom(deeperID)
	if p := b.where(deeper); !p.inView() {
		t.Errorf("changing the fragment back to #zoom=%s, %s is not in view: %v", deeperID, deeper, p)
	}
}

// TestBrowserTallHTML: a tall HTML graph opens on its heavy part and
// zooming scrolls the zoomed frame into view.
func TestBrowserTallHTML(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	b := startBrowser(t)
	url := writeFile(t, "tall.html", func(w *bytes.Buffer) error {
		return WriteHTML(w, tallProfile(), Options{Title: "tall"})
	})
	checkTallView(t, b, url, "fg-tall-html.png")
}

// TestBrowserTallSVG: the same for the SVG document opened on its own.
func TestBrowserTallSVG(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	b := startBrowser(t)
	url := writeFile(t, "tall.svg", func(w *bytes.Buffer) error {
		return WriteSVG(w, tallProfile(), Options{Title: "tall"})
	})
	checkTallView(t, b, url, "fg-tall-svg.png")
}

// chromiumEnv is the environment chromium runs in: its TMPDIR is the
// test's, since chromium leaves directories there (its singleton socket,
// org.chromium.Chromium.*) when it is killed.
func chromiumEnv(t *testing.T) []string {
	return append(os.Environ(), "TMPDIR="+t.TempDir())
}
