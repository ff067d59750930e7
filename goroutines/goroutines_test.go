package goroutines_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rewindstack/rewind/corefile"
	"github.com/rewindstack/rewind/goroutines"
	"github.com/rewindstack/rewind/goroutines/traceback"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/output"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// buildParked compiles testdata/parked with the go command, with extra
// build flags and environment (GOTOOLCHAIN=...).
func buildParked(t testing.TB, env []string, flags ...string) string {
	t.Helper()
	return buildFixture(t, "parked", env, flags...)
}

// buildFixture compiles testdata/NAME/main.go.
func buildFixture(t testing.TB, name string, env []string, flags ...string) string {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	src, err := filepath.Abs(filepath.Join("testdata", name, "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module parked\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "parked")
	cmd := exec.Command(goCmd, append(append([]string{"build", "-o", exe}, flags...), ".")...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOFLAGS=", "GOWORK=off"), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %v: %v\n%s", flags, err, out)
	}
	return exe
}

// parked is a running fixture: its stdin asks for its own goroutine dump.
type parked struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
	dir string
	// stderr is what the program wrote to its standard error (read it
	// after cmd.Wait).
	stderr *bytes.Buffer
}

func startParked(t testing.TB, exe string, shell string, env ...string) *parked {
	t.Helper()
	return startParkedArgs(t, exe, shell, nil, env...)
}

// startParkedArgs starts exe with args, under `sh -c SHELL; exec` when
// shell is not empty, and waits until it is ready.
func startParkedArgs(t testing.TB, exe, shell string, args []string, env ...string) *parked {
	t.Helper()
	var cmd *exec.Cmd
	if shell != "" {
		cmd = exec.Command("/bin/sh", append([]string{"-c", shell + `; exec "$0" "$@"`, exe}, args...)...)
	} else {
		cmd = exec.Command(exe, args...)
	}
	p := &parked{cmd: cmd, dir: t.TempDir()}
	cmd.Dir = p.dir
	cmd.Env = append(os.Environ(), env...)
	var err error
	if p.in, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	p.stderr = &stderr
	p.out = bufio.NewReader(stdout)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.in.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	ready := make(chan error, 1)
	go func() {
		line, err := p.out.ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("first line %q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("fixture: %v\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("fixture not ready after 30s\n%s", stderr.String())
	}
	return p
}

// ownDump asks the program for pprof's goroutine dump (debug=2).
func (p *parked) ownDump(t testing.TB) string {
	t.Helper()
	if _, err := io.WriteString(p.in, "dump\n"); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for {
		line, err := p.out.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the program's dump: %v", err)
		}
		if line == "END\n" {
			return b.String()
		}
		b.WriteString(line)
	}
}

// goDump is one goroutine of a dump in Go's format.
type goDump struct {
	id      int64
	state   string // the bracket text without minutes or "locked to thread"
	frames  []string
	created string
}

var headerRE = regexp.MustCompile(`^goroutine (\d+)(?: gp=\S+ m=\S+(?: mp=\S+)?)? \[(.*)\]:$`)

// parseDump parses Go's traceback format (as the runtime and rewind print
// it): for each frame its function without arguments, file:line and
// offset.
func parseDump(text string) map[int64]*goDump {
	out := map[int64]*goDump{}
	var cur *goDump
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		ln := lines[i]
		if m := headerRE.FindStringSubmatch(ln); m != nil {
			id, _ := strconv.ParseInt(m[1], 10, 64)
			state := m[2]
			if j := strings.Index(state, " labels:{"); j >= 0 {
				state = state[:j]
			}
			state = regexp.MustCompile(`, \d+ minutes`).ReplaceAllString(state, "")
			state = strings.TrimSuffix(state, ", locked to thread")
			cur = &goDump{id: id, state: state}
			out[id] = cur
			continue
		}
		if cur == nil || ln == "" || strings.HasPrefix(ln, "\t") || strings.HasPrefix(ln, "# ") {
			continue
		}
		pos := ""
		if i+1 < len(lines) && strings.HasPrefix(lines[i+1], "\t") {
			pos = strings.TrimSpace(lines[i+1])
			if j := strings.Index(pos, " fp="); j >= 0 {
				pos = pos[:j]
			}
			i++
		}
		if strings.HasPrefix(ln, "created by ") {
			cur.created = ln + " @ " + pos
			continue
		}
		cur.frames = append(cur.frames, funcName(ln)+" @ "+pos)
	}
	return out
}

// funcName strips the argument list: the parenthesized group that ends
// the line.
func funcName(line string) string {
	if !strings.HasSuffix(line, ")") {
		return line
	}
	depth := 0
	for i := len(line) - 1; i >= 0; i-- {
		switch line[i] {
		case ')':
			depth++
		case '(':
			depth--
			if depth == 0 {
				return line[:i]
			}
		}
	}
	return line
}

// compareDumps checks every goroutine of the program's own dump against
// rewind's: state, frames (function, file:line, offset) and creator. The
// goroutines running in the program's dump (the one writing it) are
// skipped. It returns the number compared.
func compareDumps(t *testing.T, rewind, own string) int {
	t.Helper()
	rw, g := parseDump(rewind), parseDump(own)
	n, bad := 0, 0
	for id, want := range g {
		if want.state == "running" || want.state == "runnable" {
			continue
		}
		got := rw[id]
		if got != nil && len(want.frames) > 0 {
			// A goroutine in a cgo call: rewind adds the C frames the
			// thread shows before those Go prints.
			for len(got.frames) > len(want.frames) && got.frames[0] != want.frames[0] {
				got.frames = got.frames[1:]
			}
		}
		if got == nil {
			t.Errorf("goroutine %d [%s] of the program's dump is missing", id, want.state)
			bad++
			continue
		}
		n++
		diff := got.state != want.state || got.created != want.created || strings.Join(got.frames, "\n") != strings.Join(want.frames, "\n")
		if diff && bad < 5 {
			t.Errorf("goroutine %d differs:\nrewind: [%s]\n  %s\n  %s\nprogram: [%s]\n  %s\n  %s", id,
				got.state, strings.Join(got.frames, "\n  "), got.created,
				want.state, strings.Join(want.frames, "\n  "), want.created)
		}
		if diff {
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d goroutines differ", bad, n)
	}
	return n
}

func report(t *testing.T, set *goroutines.Set, tg *target.Target) (*traceback.Report, string) {
	t.Helper()
	u, err := unwind.ByName("auto")
	if err != nil {
		t.Fatal(err)
	}
	rep := traceback.New(set, tg, u, &symbolize.Symbolizer{Inlines: true})
	var b bytes.Buffer
	if err := traceback.WriteText(&b, rep); err != nil {
		t.Fatal(err)
	}
	return rep, b.String()
}

func liveDump(t *testing.T, pid int) (*traceback.Report, string, *live.Snapshot) {
	t.Helper()
	snap, set, err := goroutines.Capture(pid, live.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rep, text := report(t, set, snap.Target(nil, nil))
	for _, n := range rep.Notes {
		t.Logf("note: %s", n)
	}
	return rep, text, snap
}

func requirePtrace(t testing.TB) {
	if os.Geteuid() != 0 {
		if b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope"); err == nil && strings.TrimSpace(string(b)) != "0" {
			t.Skip("needs ptrace over child processes (root or ptrace_scope 0)")
		}
	}
}

// TestLiveMatchesOwnDump dumps the fixture's ~300 parked goroutines live
// and compares each with the program's own debug=2 dump taken right
// after: wait reason, frames with file:line and offsets, creator.
//
// Besides the machine's Go, the fixture is built with go1.27.3 and with
// the toolchains REWIND_GO_TOOLCHAINS lists (e.g. "go1.22.12 go1.23.12
// go1.24.13 go1.25.14"), which the go command fetches from the module
// proxy (a toolchain it cannot fetch is skipped, saying so).
func TestLiveMatchesOwnDump(t *testing.T) {
	requirePtrace(t)
	type variant struct {
		name      string
		toolchain string
		flags     []string
	}
	vs := []variant{{"dwarf", "", nil}, {"stripped", "", []string{"-ldflags=-s -w"}},
		{"pie", "", []string{"-buildmode=pie"}}, {"pie-stripped", "", []string{"-buildmode=pie", "-ldflags=-s -w"}}}
	for _, tc := range append([]string{"go1.27.3"}, strings.Fields(os.Getenv("REWIND_GO_TOOLCHAINS"))...) {
		vs = append(vs, variant{tc + "/dwarf", tc, nil}, variant{tc + "/stripped", tc, []string{"-ldflags=-s -w"}})
	}
	for _, v := range vs {
		t.Run(v.name, func(t *testing.T) {
			var env []string
			if v.toolchain != "" {
				requireToolchain(t, v.toolchain)
				env = []string{"GOTOOLCHAIN=" + v.toolchain}
			}
			p := startParked(t, buildParked(t, env, v.flags...), "")
			rep, text, snap := liveDump(t, p.cmd.Process.Pid)
			own := p.ownDump(t)
			n := compareDumps(t, text, own)
			checkTraceback(t, text)
			t.Logf("%d goroutines, %d compared with the program's own dump, pause %v", len(rep.Goroutines), n, snap.Pause)
			if n < 250 {
				t.Errorf("only %d goroutines compared", n)
			}
			checkKinds(t, rep)
		})
	}
}

var (
	callRE = regexp.MustCompile(`^\S.*\)$`)
	posRE  = regexp.MustCompile(`^\t\S+:\d+( \+0x[0-9a-f]+)?$`)
)

// checkTraceback checks text against the grammar of Go's traceback that
// parsers of Go dumps (panicparse) hold to: blocks separated by an empty
// line, each a header, then at least one frame (a call line and a tab
// and position line), then optionally "created by" and its position.
func checkTraceback(t *testing.T, text string) {
	t.Helper()
	bad := 0
	for _, block := range strings.Split(strings.TrimSuffix(text, "\n"), "\n\n") {
		if strings.HasPrefix(block, "# note: ") {
			continue
		}
		lines := strings.Split(block, "\n")
		why := ""
		switch {
		case !headerRE.MatchString(lines[0]):
			why = "header"
		case len(lines) < 3:
			why = "no frame"
		}
		body := lines[1:]
		if n := len(body); why == "" && n >= 2 && strings.HasPrefix(body[n-2], "created by ") {
			if !posRE.MatchString(body[n-1]) {
				why = "creator's position"
			}
			body = body[:n-2]
		}
		for i := 0; why == "" && i < len(body); i += 2 {
			if i+1 == len(body) || !callRE.MatchString(body[i]) || !posRE.MatchString(body[i+1]) {
				why = fmt.Sprintf("frame line %d", i+2)
			}
		}
		if why == "" && len(body) == 0 {
			why = "no frame"
		}
		if why != "" {
			if bad < 3 {
				t.Errorf("not Go's traceback format (%s):\n%s", why, block)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d goroutines not in Go's traceback format", bad)
	}
}

var toolchains = map[string]error{}

// requireToolchain skips t when the go command cannot run toolchain tc
// (it downloads it from the module proxy on first use).
func requireToolchain(t testing.TB, tc string) {
	t.Helper()
	err, seen := toolchains[tc]
	if !seen {
		cmd := exec.Command("go", "version")
		cmd.Env = append(os.Environ(), "GOTOOLCHAIN="+tc, "GOFLAGS=", "GOWORK=off")
		var out []byte
		out, err = cmd.CombinedOutput()
		if err == nil && !strings.Contains(string(out), tc+" ") {
			err = fmt.Errorf("go version says %q", strings.TrimSpace(string(out)))
		} else if err != nil {
			err = fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
		}
		toolchains[tc] = err
	}
	if err != nil {
		t.Skipf("toolchain %s unavailable: %v", tc, err)
	}
}

// checkKinds checks the fixture's wait reasons, labels, the thread of a
// syscall goroutine and the JSON names.
func checkKinds(t *testing.T, rep *traceback.Report) {
	t.Helper()
	seen := map[string]int{}
	labelled := 0
	for _, g := range rep.Goroutines {
		seen[g.WaitReason]++
		if g.Labels["kind"] == "labelled" {
			labelled++
			if w := g.Labels["worker"]; w != "0" && w != "1" && w != "2" || len(g.Labels) != 2 {
				t.Errorf("goroutine %d labels %v", g.ID, g.Labels)
			}
		}
		if g.Status == "syscall" && g.Thread == nil {
			t.Errorf("goroutine %d in a system call has no thread", g.ID)
		}
	}
	waits := []string{"chan receive", "chan send", "select", "sync.Mutex.Lock", "sync.RWMutex.RLock",
		"sync.Cond.Wait", "sleep", "IO wait"}
	// sync.WaitGroup.Wait has its own wait reason since Go 1.24 (before,
	// semacquire); pprof labels are a slice since 1.24 (before, a map).
	modern := rep.GoVersion >= "go1.24" || len(rep.GoVersion) > len("go1.2x") && rep.GoVersion[:6] >= "go1.24"
	if modern {
		waits = append(waits, "sync.WaitGroup.Wait")
	} else {
		waits = append(waits, "semacquire")
	}
	for _, w := range waits {
		if seen[w] == 0 {
			t.Errorf("no goroutine waits for %q (%v)", w, seen)
		}
	}
	if labelled != 10 {
		t.Errorf("%d goroutines carry the fixture's pprof labels, want 10 (%s)", labelled, rep.GoVersion)
	}
	var b bytes.Buffer
	if err := traceback.WriteJSON(&b, rep); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{`"goroutines"`, `"id"`, `"status"`, `"wait_reason"`, `"wait_minutes"`, `"thread"`,
		`"labels"`, `"created_by"`, `"function"`, `"file"`, `"line"`, `"goroutine"`, `"frames"`, `"inlined": true`} {
		if !bytes.Contains(b.Bytes(), []byte(name)) {
			t.Errorf("JSON has no %s", name)
		}
	}
}

// TestCoreMatchesOwnDump dumps the fixture from a gcore core file, and
// from the core the kernel writes when GOTRACEBACK=crash makes SIGQUIT
// abort it, and compares with the program's own dump taken before.
func TestCoreMatchesOwnDump(t *testing.T) {
	requirePtrace(t)
	exe := buildParked(t, nil)
	t.Run("gcore", func(t *testing.T) {
		if _, err := exec.LookPath("gcore"); err != nil {
			t.Skip("no gcore (gdb)")
		}
		p := startParked(t, exe, "")
		prefix := filepath.Join(t.TempDir(), "core")
		if out, err := exec.Command("gcore", "-o", prefix, strconv.Itoa(p.cmd.Process.Pid)).CombinedOutput(); err != nil {
			t.Fatalf("gcore: %v\n%s", err, out)
		}
		own := p.ownDump(t)
		coreDump(t, fmt.Sprintf("%s.%d", prefix, p.cmd.Process.Pid), own)
	})
	t.Run("crash", func(t *testing.T) {
		pattern, _ := os.ReadFile("/proc/sys/kernel/core_pattern")
		if strings.HasPrefix(string(pattern), "|") {
			t.Skipf("core_pattern pipes to a program: %s", pattern)
		}
		p := startParked(t, exe, "ulimit -c unlimited", "GOTRACEBACK=crash")
		own := p.ownDump(t)
		pid := p.cmd.Process.Pid
		if err := p.cmd.Process.Signal(syscall.SIGQUIT); err != nil {
			t.Fatal(err)
		}
		_ = p.cmd.Wait()
		var core string
		for _, name := range []string{"core", fmt.Sprintf("core.%d", pid)} {
			if _, err := os.Stat(filepath.Join(p.dir, name)); err == nil {
				core = filepath.Join(p.dir, name)
			}
		}
		if core == "" {
			t.Skipf("no core file in %s (core_pattern %q)", p.dir, strings.TrimSpace(string(pattern)))
		}
		coreDump(t, core, own)
	})
}

// coreReport reads the goroutines of the core at path and renders them.
func coreReport(t *testing.T, path string) (*traceback.Report, string) {
	t.Helper()
	c, err := corefile.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tg, err := c.Target(nil, "")
	if err != nil {
		t.Fatal(err)
	}
	set, err := goroutines.FromCore(c, "")
	if err != nil {
		t.Fatal(err)
	}
	return report(t, set, tg)
}

func coreDump(t *testing.T, path, own string) {
	t.Helper()
	rep, text := coreReport(t, path)
	n := compareDumps(t, text, own)
	t.Logf("%d goroutines from %s, %d compared", len(rep.Goroutines), filepath.Base(path), n)
	if n < 250 {
		t.Errorf("only %d goroutines compared", n)
	}
}

// TestChurnDumped100Times dumps a program that keeps creating and ending
// goroutines 100 times: every dump succeeds, every goroutine kept is
// consistent (frames end at runtime.goexit or in the creator-less main
// goroutine), and the program keeps running: it goes on churning between
// dumps and answers afterwards.
func TestChurnDumped100Times(t *testing.T) {
	requirePtrace(t)
	p2 := startParkedArgs(t, buildParked(t, nil), "", []string{"churn"})
	pid := p2.cmd.Process.Pid
	count := func() int64 {
		if _, err := io.WriteString(p2.in, "churned\n"); err != nil {
			t.Fatal(err)
		}
		line, err := p2.out.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
		return n
	}
	before := count()
	u, _ := unwind.ByName("auto")
	sym := &symbolize.Symbolizer{Inlines: true}
	objs := &target.Objects{}
	dropped, total, again := 0, 0, 0
	for i := 0; i < 100; i++ {
		snap, set, err := goroutines.Capture(pid, live.Options{})
		if err != nil {
			t.Fatalf("dump %d: %v", i, err)
		}
		if goroutines.ReadAgain(set) {
			again++
		}
		rep := traceback.New(set, snap.Target(objs, nil), u, sym)
		total += len(rep.Goroutines)
		for _, n := range rep.Notes {
			if strings.Contains(n, "torn") {
				dropped++
			}
		}
		for _, g := range rep.Goroutines {
			if g.Status == "waiting" && g.End != "outermost" {
				t.Errorf("dump %d: goroutine %d [%s] walk ends %s %s", i, g.ID, g.WaitReason, g.End, g.EndDetail)
			}
		}
		if i%10 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	// The program goes on churning: it need not have run between the
	// dumps (on a loaded machine), but it must once they are done.
	after := count()
	for deadline := time.Now().Add(time.Minute); after <= before && time.Now().Before(deadline); after = count() {
		time.Sleep(time.Millisecond)
	}
	if after <= before {
		t.Errorf("the program did not run after the dumps: %d goroutines churned before, %d a minute after", before, after)
	}
	state, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(string(state)); len(f) > 2 && (f[2] == "T" || f[2] == "t") {
		t.Errorf("the program is left stopped: %s", f[2])
	}
	t.Logf("100 dumps (%d compared with the read before the pause), %d goroutines in all, %d torn gs dropped; %d goroutines churned meanwhile",
		again, total, dropped, after-before)
}

// TestSyscallAndCgo dumps a goroutine blocked in C through cgo and one in
// a plain system call: both are "syscall" with their thread; the cgo one
// starts with the C frames its thread shows (libc's sleep, the C function
// of the cgo preamble) above the Go frames Go's own dump prints, which
// must match too.
func TestSyscallAndCgo(t *testing.T) {
	requirePtrace(t)
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc for cgo")
	}
	p := startParked(t, buildFixture(t, "cgo", []string{"CGO_ENABLED=1"}), "")
	rep, text, _ := liveDump(t, p.cmd.Process.Pid)
	own := p.ownDump(t)
	if n := compareDumps(t, text, own); n < 2 {
		t.Errorf("%d goroutines compared", n)
	}
	var cgo, plain *traceback.Entry
	for i := range rep.Goroutines {
		g := &rep.Goroutines[i]
		for _, f := range g.Frames {
			switch f.Function {
			case "main.cSleep":
				cgo = g
			case "main.rawRead":
				plain = g
			}
		}
	}
	if cgo == nil || plain == nil {
		t.Fatalf("goroutines not found:\n%s", text)
	}
	for _, g := range []*traceback.Entry{cgo, plain} {
		if g.Status != "syscall" || g.Thread == nil {
			t.Errorf("goroutine %d: status %q, thread %v", g.ID, g.Status, g.Thread)
		}
	}
	idx := map[string]int{}
	for i, f := range cgo.Frames {
		if _, ok := idx[f.Function]; !ok {
			idx[f.Function] = i
		}
	}
	c, ok1 := idx["csleep"]
	cf, ok2 := idx["main._Cfunc_csleep"]
	if !ok1 || !ok2 || c > cf || c == 0 {
		t.Errorf("cgo goroutine's frames lack C frames (libc, csleep) above main._Cfunc_csleep:\n%s", text)
	}
	if plain.Frames[0].Function != "syscall.Syscall" && plain.Frames[0].Function != "syscall.RawSyscall" {
		t.Errorf("plain system call starts at %s", plain.Frames[0].Function)
	}
}

// TestLiveKeepsParkedStacks: after a collection has marked the parked
// goroutines (g.waitsince), their stacks copied before the pause are used
// instead of copying them again in it, and the dump still matches the
// program's own.
func TestLiveKeepsParkedStacks(t *testing.T) {
	requirePtrace(t)
	for _, tc := range append([]string{"", "go1.27.3"}, strings.Fields(os.Getenv("REWIND_GO_TOOLCHAINS"))...) {
		t.Run("go"+strings.TrimPrefix(tc, "go"), func(t *testing.T) {
			var env []string
			if tc != "" {
				requireToolchain(t, tc)
				env = []string{"GOTOOLCHAIN=" + tc}
			}
			testKeepsParkedStacks(t, env)
		})
	}
}

func testKeepsParkedStacks(t *testing.T, env []string) {
	p := startParked(t, buildParked(t, env), "")
	if _, err := io.WriteString(p.in, "gc\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := p.out.ReadString('\n'); err != nil || line != "ok\n" {
		t.Fatalf("fixture answered %q, %v", line, err)
	}
	snap, set, err := goroutines.Capture(p.cmd.Process.Pid, live.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rep, text := report(t, set, snap.Target(nil, nil))
	kept := goroutines.KeptStacks(set)
	t.Logf("%d of %d stacks taken from the read before the pause (pause %v)", kept, len(rep.Goroutines), snap.Pause)
	if !goroutines.ReadAgain(set) {
		t.Errorf("the pause read everything anew instead of comparing with the read before it")
	}
	if kept < len(rep.Goroutines)/2 {
		t.Errorf("only %d of %d parked stacks kept from the read before the pause", kept, len(rep.Goroutines))
	}
	if n := compareDumps(t, text, p.ownDump(t)); n < 250 {
		t.Errorf("only %d goroutines compared", n)
	}
}

// TestRunningGoroutinesNotKept dumps, 100 times, a program that no
// collection has run in (GOGC=off), whose two goroutines pass a counter
// back and forth for ever: they park again and again at the same place,
// where only g.trackingSeq (8 bits) and what the park rewrites tell that
// they ran. Between the read before the pause and the pause the test
// waits until the program has counted two more exchanges than it had
// after that read, so that each of the two has run since (on an idle
// machine 20 ms let them run thousands of times; on a loaded one a sleep
// may let them run not at all, and then keeping their stacks is right).
// The parked goroutines keep the stacks read before the pause; the two
// running ones must not, but for the rare run count that is a multiple
// of 256 with every other field of the g as it was.
func TestRunningGoroutinesNotKept(t *testing.T) {
	requirePtrace(t)
	p := startParkedArgs(t, buildParked(t, nil), "", []string{"pingpong"}, "GOGC=off")
	pid := p.cmd.Process.Pid
	u, _ := unwind.ByName("auto")
	sym := &symbolize.Symbolizer{Inlines: true}
	objs := &target.Objects{}
	const dumps = 100
	// exchanges asks the program how many times the pair passed the
	// counter; "churned" is answered by a goroutine of its own.
	exchanges := func() int64 {
		if _, err := io.WriteString(p.in, "churned\n"); err != nil {
			t.Fatal(err)
		}
		line, err := p.out.ReadString('\n')
		n, perr := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
		if err != nil || perr != nil {
			t.Fatalf("fixture answered %q, %v", line, err)
		}
		return n
	}
	fewest := int64(-1)
	defer goroutines.SetAfterPreRead(func() {
		// Every exchange is one goroutine of the pair taking the counter
		// and running: the one that takes from+1 and the one that takes
		// from+2 both ran after the read before the pause.
		from := exchanges()
		time.Sleep(20 * time.Millisecond)
		n := exchanges()
		for ; n < from+2; n = exchanges() {
			time.Sleep(time.Millisecond)
		}
		if fewest < 0 || n-from < fewest {
			fewest = n - from
		}
	})()
	keptPing, seenPing, kept, total := 0, 0, 0, 0
	var pair map[int64]bool // the ping-pong goroutines' ids
	for i := 0; i < dumps; i++ {
		snap, set, err := goroutines.Capture(pid, live.Options{})
		if err != nil {
			t.Fatalf("dump %d: %v", i, err)
		}
		for j := range set.Goroutines {
			g := &set.Goroutines[j]
			if g.Status == "waiting" {
				total++
				if goroutines.Kept(g) {
					kept++
				}
			}
		}
		if len(pair) < 2 {
			// The pair by their ids, from the frames of the first dumps
			// (one of the two may be caught where its frames do not
			// show main.pingpong, as it enters the runtime): the other
			// dumps need no walks.
			if pair == nil {
				pair = map[int64]bool{}
			}
			rep := traceback.New(set, snap.Target(objs, nil), u, sym)
			for _, g := range rep.Goroutines {
				if slices.ContainsFunc(g.Frames, func(f output.Frame) bool { return f.Function == "main.pingpong" }) {
					pair[g.ID] = true
				}
			}
			if len(pair) > 2 || len(pair) < 2 && i == 9 {
				t.Fatalf("%d goroutines in main.pingpong in the first %d dumps, want 2", len(pair), i+1)
			}
			if len(pair) < 2 {
				continue
			}
		}
		for j := range set.Goroutines {
			g := &set.Goroutines[j]
			if !pair[g.ID] || g.Status != "waiting" {
				continue // running or runnable in the pause: never kept
			}
			seenPing++
			if goroutines.Kept(g) {
				keptPing++
			}
		}
	}
	t.Logf("%d dumps: %d of %d parked goroutines kept; the ping-pong pair kept %d times of %d (at least %d exchanges between the reads)", dumps, kept, total, keptPing, seenPing, fewest)
	if kept < total/2 {
		t.Errorf("only %d of %d parked goroutines kept from the read before the pause", kept, total)
	}
	if seenPing < dumps/2 {
		t.Errorf("the ping-pong goroutines were found parked %d times in %d dumps", seenPing, dumps)
	}
	// A run count multiple of 256: 1 in 256 at most, when nothing else
	// of the g changed.
	if keptPing > seenPing/25 {
		t.Errorf("the ping-pong goroutines, which run all the time, kept their earlier stacks %d times of %d", keptPing, seenPing)
	}
}

// TestMaxPause: a thread that cannot stop (it waits in vfork for a child
// that sleeps half a second) holds the others no longer than MaxPause
// when the capture staggers (StaggerDuring): the goroutines are read with
// the threads stopped so far, the parked ones match the program's own
// dump, the one on the late thread is listed, and a note says so.
func TestMaxPause(t *testing.T) {
	requirePtrace(t)
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc for cgo")
	}
	p := startParkedArgs(t, buildFixture(t, "cgo", []string{"CGO_ENABLED=1"}), "", []string{"vfork"})
	const budget = 20 * time.Millisecond
	var snap *live.Snapshot
	var set *goroutines.Set
	for try := 0; try < 10; try++ {
		var err error
		snap, set, err = goroutines.Capture(p.cmd.Process.Pid, live.Options{MaxPause: budget, StaggerDuring: true})
		if err != nil {
			t.Fatal(err)
		}
		if snap.Staggered {
			break
		}
		// The thread was between two vforks: try again.
	}
	if !snap.Staggered {
		t.Fatal("the vforking thread always stopped at once")
	}
	// The budget, plus copying, plus a loaded machine's scheduling; the
	// vfork holds its thread for half a second.
	if snap.Pause > 10*budget {
		t.Errorf("pause %v, budget %v", snap.Pause, budget)
	}
	rep, text := report(t, set, snap.Target(nil, nil))
	if n := compareDumps(t, text, p.ownDump(t)); n < 2 {
		t.Errorf("%d goroutines compared", n)
	}
	if !strings.Contains(strings.Join(rep.Notes, "\n"), "slow to stop (--max-pause)") {
		t.Errorf("no note says the goroutines were read staggered: %q", rep.Notes)
	}
	checkTraceback(t, text)
	t.Logf("staggered: pause %v\n%s", snap.Pause, text)
}

// TestIdleThreadsLeftAsleep dumps the parked fixture, whose threads all
// sleep in the kernel: none is stopped (live.Options.LeaveAsleep), the
// pause is zero, and the dump is the one a capture that stops every
// thread makes.
func TestIdleThreadsLeftAsleep(t *testing.T) {
	requirePtrace(t)
	p := startParked(t, buildParked(t, nil), "")
	pid := p.cmd.Process.Pid
	restore := goroutines.SetLeaveAsleep(false)
	_, stopped, full := liveDump(t, pid)
	restore()
	if full.Pause <= 0 || full.Phases.Asleep != 0 {
		t.Fatalf("with every thread stopped: pause %v, %d threads asleep", full.Pause, full.Phases.Asleep)
	}
	// A thread the kernel wakes meanwhile is stopped and the goroutines
	// read again: a few tries allow for a stray wake-up.
	var snap *live.Snapshot
	var text string
	for try := 0; try < 5; try++ {
		_, text, snap = liveDump(t, pid)
		if snap.Phases.Woke == 0 {
			break
		}
	}
	if snap.Phases.Asleep != len(snap.Threads) || snap.Pause != 0 {
		t.Errorf("%d of %d threads left asleep, pause %v; want all, none", snap.Phases.Asleep, len(snap.Threads), snap.Pause)
	}
	if text != stopped {
		t.Errorf("the dump with threads left asleep differs from the one with every thread stopped:\n%s\n---\n%s", text, stopped)
	}
}
