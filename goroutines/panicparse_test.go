package goroutines_test

import (
	"bytes"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/maruel/panicparse/v2/stack"

	"github.com/rewindstack/rewind/goroutines"
	"github.com/rewindstack/rewind/goroutines/traceback"
	"github.com/rewindstack/rewind/live"
)

// ppOpts has panicparse parse a dump as it is: no guessing of paths on
// this machine, no reading of sources.
var ppOpts = &stack.Opts{}

// ppParse parses a dump in Go's format with panicparse
// (stack.ScanSnapshot), failing t unless it read every goroutine header
// the text holds.
func ppParse(t *testing.T, name, text string) map[int]*stack.Goroutine {
	t.Helper()
	snap, _, err := stack.ScanSnapshot(strings.NewReader(text), io.Discard, ppOpts)
	if err != nil && err != io.EOF {
		t.Errorf("%s: panicparse: %v", name, err)
	}
	headers := len(regexp.MustCompile(`(?m)^goroutine \d+ `).FindAllString(text, -1))
	out := map[int]*stack.Goroutine{}
	if snap != nil {
		for _, g := range snap.Goroutines {
			out[g.ID] = g
		}
	}
	if len(out) != headers || headers == 0 {
		t.Errorf("%s: panicparse read %d goroutines of %d:\n%s", name, len(out), headers, text[:min(len(text), 3000)])
	}
	return out
}

// ppCalls renders a panicparse stack as function @ file:line lines.
func ppCalls(calls []stack.Call) string {
	var b strings.Builder
	for _, c := range calls {
		fmt.Fprintf(&b, "%s @ %s:%d\n", c.Func.Complete, c.RemoteSrcPath, c.Line)
	}
	return b.String()
}

// ppSame compares what panicparse read of one goroutine in rewind's dump
// and in the program's, taken later: state, wait minutes (the program's
// may have grown by up to slack; slack < 0 skips them: a core does not
// know them), locked, frames (function, file, line) and creator.
func ppSame(got, want *stack.Goroutine, slack int) string {
	g, w := &got.Signature, &want.Signature
	minutes := slack < 0 || w.SleepMin >= g.SleepMin && w.SleepMin <= g.SleepMin+slack && g.SleepMin == g.SleepMax && w.SleepMin == w.SleepMax
	if g.State != w.State || !minutes || g.Locked != w.Locked ||
		ppCalls(g.Stack.Calls) != ppCalls(w.Stack.Calls) || ppCalls(g.CreatedBy.Calls) != ppCalls(w.CreatedBy.Calls) {
		return fmt.Sprintf("rewind: [%s, %d minutes, locked %v]\n%s  created by %s\nprogram: [%s, %d minutes, locked %v]\n%s  created by %s",
			g.State, g.SleepMin, g.Locked, ppCalls(g.Stack.Calls), ppCalls(g.CreatedBy.Calls),
			w.State, w.SleepMin, w.Locked, ppCalls(w.Stack.Calls), ppCalls(w.CreatedBy.Calls))
	}
	return ""
}

// ask sends cmd to a fixture of testdata/labels and returns what it
// prints up to its line "END" (or its one line, for "id").
func ask(t *testing.T, p *parked, cmd string) string {
	t.Helper()
	if _, err := io.WriteString(p.in, cmd+"\n"); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for {
		line, err := p.out.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the program's answer to %q: %v", cmd, err)
		}
		if cmd == "id" {
			return strings.TrimSpace(line)
		}
		if line == "END\n" {
			return b.String()
		}
		b.WriteString(line)
	}
}

// write renders rep with fn.
func write(t *testing.T, rep *traceback.Report, fn func(io.Writer, *traceback.Report) error) string {
	t.Helper()
	var b bytes.Buffer
	if err := fn(&b, rep); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestPanicparseReadsDumps has panicparse (stack.ScanSnapshot) parse
// rewind's goroutine dumps of testdata/labels (plain, --group, from a
// core; built by Go 1.26 and 1.27, with symbols and stripped) and the
// program's own traceback (runtime.Stack of every goroutine; for the
// runtime's goroutines the GOTRACEBACK=system dump SIGQUIT prints), and
// compares every goroutine: id, state, wait minutes, locked, frames,
// creator. With labels printed, rewind's headers are those the program
// prints with GODEBUG=tracebacklabels=1, byte for byte, in the syntax of
// the Go version that built it.
func TestPanicparseReadsDumps(t *testing.T) {
	requirePtrace(t)
	type variant struct {
		name      string
		toolchain string
		minor     int
		flags     []string
	}
	vs := []variant{{"go1.26", "", 26, nil}, {"go1.26/stripped", "", 26, []string{"-ldflags=-s -w"}},
		{"go1.27", "go1.27.3", 27, nil}, {"go1.27/stripped", "go1.27.3", 27, []string{"-ldflags=-s -w"}}}
	for _, v := range vs {
		t.Run(v.name, func(t *testing.T) {
			var env []string
			if v.toolchain != "" {
				requireToolchain(t, v.toolchain)
				env = []string{"GOTOOLCHAIN=" + v.toolchain}
			}
			p := startParked(t, buildFixture(t, "labels", env, v.flags...), "", "GOTRACEBACK=system")
			pid := p.cmd.Process.Pid
			snap, set, err := goroutines.Capture(pid, live.Options{})
			if err != nil {
				t.Fatal(err)
			}
			captured := time.Now()
			rep, _ := report(t, set, snap.Target(nil, nil))
			if !strings.HasPrefix(rep.GoVersion, fmt.Sprintf("go1.%d", v.minor)) {
				if v.minor != 26 {
					t.Fatalf("built by %s, want go1.%d", rep.GoVersion, v.minor)
				}
				t.Skipf("the machine's Go is %s, not 1.26", rep.GoVersion)
			}
			plain := write(t, rep, traceback.WriteText)
			grouped := write(t, rep, traceback.WriteGrouped)
			labelled := write(t, rep, traceback.TextOptions{Labels: true}.WriteText)
			var core string
			if _, err := exec.LookPath("gcore"); err == nil {
				prefix := filepath.Join(t.TempDir(), "core")
				if out, err := exec.Command("gcore", "-o", prefix, strconv.Itoa(pid)).CombinedOutput(); err != nil {
					t.Fatalf("gcore: %v\n%s", err, out)
				}
				core = fmt.Sprintf("%s.%d", prefix, pid)
			} else {
				t.Log("no gcore (gdb): no core compared")
			}
			ownPlain, ownLabels := ask(t, p, "plain"), ask(t, p, "labels")
			dumper, _ := strconv.Atoi(ask(t, p, "id"))
			// Wait minutes grow while the test runs (a minute of gcore
			// on a loaded machine).
			slack := int(time.Since(captured).Minutes()) + 1

			rw, own := ppParse(t, "rewind", plain), ppParse(t, "program", ownPlain)
			n := 0
			for id, want := range own {
				if id == dumper {
					continue
				}
				got := rw[id]
				if got == nil {
					t.Errorf("goroutine %d of the program's dump is not in rewind's", id)
					continue
				}
				if d := ppSame(got, want, slack); d != "" {
					t.Errorf("goroutine %d differs:\n%s", id, d)
				}
				n++
			}
			if n < 12 {
				t.Errorf("%d goroutines compared, want the fixture's 12", n)
			}

			checkLabelHeaders(t, labelled, ownLabels, dumper, v.minor)
			checkGrouped(t, grouped, rw, len(rep.Goroutines))

			if core != "" {
				_, fromCore := coreReport(t, core)
				fc := ppParse(t, "core", fromCore)
				for id, want := range own {
					if id == dumper {
						continue
					}
					if got := fc[id]; got == nil {
						t.Errorf("core: goroutine %d is missing", id)
					} else if d := ppSame(got, want, -1); d != "" {
						t.Errorf("core: goroutine %d differs:\n%s", id, d)
					}
				}
			}

			// The runtime's own goroutines, as GOTRACEBACK=system shows
			// them: SIGQUIT makes the program print that and exit.
			if err := p.cmd.Process.Signal(syscall.SIGQUIT); err != nil {
				t.Fatal(err)
			}
			_ = p.cmd.Wait()
			sys := p.stderr.String()
			if i := strings.Index(sys, "\ngoroutine "); i >= 0 {
				sys = sys[i+1:]
			}
			compareSystem(t, rw, sys, own, int(time.Since(captured).Minutes())+1)
		})
	}
}

// checkLabelHeaders compares the header lines of rewind's dump with
// labels and of the program's own with GODEBUG=tracebacklabels=1.
func checkLabelHeaders(t *testing.T, rewind, own string, dumper, minor int) {
	t.Helper()
	headers := func(text string) map[string]string {
		out := map[string]string{}
		for _, ln := range strings.Split(text, "\n") {
			if strings.HasPrefix(ln, "goroutine ") {
				id, _, _ := strings.Cut(ln[len("goroutine "):], " ")
				out[id] = ln
			}
		}
		return out
	}
	rw, want := headers(rewind), headers(own)
	labelled := 0
	for id, w := range want {
		if id == strconv.Itoa(dumper) {
			continue
		}
		if rw[id] != w {
			t.Errorf("header of goroutine %s:\nrewind:  %s\nprogram: %s", id, rw[id], w)
		}
		if strings.Contains(w, "{") {
			labelled++
		}
	}
	if labelled != 7 {
		t.Errorf("the program printed labels for %d goroutines, want 7:\n%s", labelled, own)
	}
	syntax := `labels:{"req": "r0", "zone": "eu-west"}]:`
	if minor >= 27 {
		syntax = `] {req: r0, zone: "eu-west"}:`
	}
	if !strings.Contains(rewind, syntax) {
		t.Errorf("rewind's labels are not Go 1.%d's (%s):\n%s", minor, syntax, rewind)
	}
}

// checkGrouped checks that panicparse reads every group of rewind's
// --group output (a group of N prints ", N goroutines: IDS" in its
// header's brackets), that the groups count every goroutine once, and
// that each group's stack is its first goroutine's.
func checkGrouped(t *testing.T, grouped string, plain map[int]*stack.Goroutine, total int) {
	t.Helper()
	gs := ppParse(t, "--group", grouped)
	if len(gs) >= total || len(gs) < 2 {
		t.Errorf("--group printed %d groups for %d goroutines", len(gs), total)
	}
	countRE := regexp.MustCompile(`, (\d+) goroutines: [^\]]*\]`)
	sum := 0
	for _, ln := range strings.Split(grouped, "\n") {
		if !strings.HasPrefix(ln, "goroutine ") {
			continue
		}
		if m := countRE.FindStringSubmatch(ln); m != nil {
			n, _ := strconv.Atoi(m[1])
			sum += n
		} else {
			sum++
		}
	}
	if sum != total {
		t.Errorf("--group counts %d goroutines, the dump has %d", sum, total)
	}
	for id, g := range gs {
		if p := plain[id]; p == nil || ppCalls(p.Stack.Calls) != ppCalls(g.Stack.Calls) || p.State != g.State {
			t.Errorf("--group: goroutine %d's group differs from its stack", id)
		}
	}
}

// compareSystem compares the runtime's own goroutines (those the default
// traceback hides) of rewind's dump with the program's GOTRACEBACK=system
// dump. Such a goroutine may have run between the two dumps (the
// scavenger, a collector's worker): one whose state changed is not
// compared; one in the same state has the same frames.
func compareSystem(t *testing.T, rw map[int]*stack.Goroutine, sys string, user map[int]*stack.Goroutine, slack int) {
	t.Helper()
	snap, _, err := stack.ScanSnapshot(strings.NewReader(sys), io.Discard, ppOpts)
	if snap == nil {
		t.Fatalf("panicparse read nothing of the SIGQUIT dump (%v):\n%s", err, sys)
	}
	n := 0
	for _, want := range snap.Goroutines {
		if user[want.ID] != nil || want.ID == 0 {
			continue
		}
		got := rw[want.ID]
		if got == nil {
			t.Errorf("runtime goroutine %d [%s] is not in rewind's dump", want.ID, want.State)
			continue
		}
		if got.State != want.State {
			t.Logf("runtime goroutine %d: [%s] in rewind's dump, [%s] in the program's: not compared", want.ID, got.State, want.State)
			continue
		}
		if d := ppSame(got, want, slack); d != "" {
			t.Errorf("runtime goroutine %d differs:\n%s", want.ID, d)
		}
		n++
	}
	if n < 3 {
		t.Errorf("%d runtime goroutines compared:\n%s", n, sys)
	}
	t.Logf("%d runtime goroutines compared", n)
}
