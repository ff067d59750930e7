package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startParkedGo builds and starts the goroutines package's fixture (about
// 300 goroutines parked in different ways) and waits until it is ready.
func startParkedGo(t *testing.T) *exec.Cmd {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs ptrace over child processes (root)")
	}
	dir := t.TempDir()
	src, err := os.ReadFile("../../goroutines/testdata/parked/main.go")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "main.go"), src, 0o644)
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module parked\n\ngo 1.22\n"), 0o644)
	build := exec.Command("go", "build", "-o", "parked", ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(filepath.Join(dir, "parked"))
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	ready := make(chan string, 1)
	go func() { l, _ := bufio.NewReader(out).ReadString('\n'); ready <- l }()
	select {
	case l := <-ready:
		if l != "ready\n" {
			t.Fatalf("fixture said %q", l)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("fixture not ready")
	}
	return cmd
}

// TestDumpGoroutines runs `rewind dump PID --goroutines` with text, --json
// and --group output, and --core on a gcore of the same process.
func TestDumpGoroutines(t *testing.T) {
	cmd := startParkedGo(t)
	pid := strconv.Itoa(cmd.Process.Pid)

	text, stderr, code := run(t, "dump", pid, "--goroutines")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	// The pause is said with --stats only; no header carries labels
	// unless asked (Go prints them only with GODEBUG=tracebacklabels=1).
	if strings.Contains(stderr, "paused") || strings.Contains(stderr, "goroutines") {
		t.Errorf("stderr without --stats: %s", stderr)
	}
	if strings.Contains(text, "labels:{") || strings.Contains(text, "] {") {
		t.Errorf("labels in the default text:\n%s", text)
	}
	labelled, stderr, code := run(t, "dump", pid, "--goroutines", "--labels", "--stats")
	if code != 0 {
		t.Fatalf("--labels: exit %d: %s", code, stderr)
	}
	// The fixture is built by the machine's Go (1.26): its syntax.
	if n := len(regexp.MustCompile(`(?m)^goroutine \d+ \[chan receive labels:\{"kind": "labelled", "worker": "[012]"\}\]:$`).FindAllString(labelled, -1)); n != 10 {
		t.Errorf("--labels: %d headers with the fixture's labels in Go 1.26's syntax, want 10:\n%s", n, labelled[:min(len(labelled), 3000)])
	}
	// An idle program's threads are left asleep, not stopped (see
	// live.Options.LeaveAsleep): no pause at all.
	if !regexp.MustCompile(`(?m)^rewind: pause [0-9.]+ ms: (threads stopped after|no thread stopped: \d+ of \d+ threads left asleep)`).MatchString(stderr) ||
		!regexp.MustCompile(`(?m)^rewind: \d+ goroutines$`).MatchString(stderr) || !regexp.MustCompile(`(?m)^rewind: goroutines read \(ms\): [0-9.]+: list`).MatchString(stderr) {
		t.Errorf("--stats does not say the pause and the goroutines: %s", stderr)
	}
	headers := regexp.MustCompile(`(?m)^goroutine \d+ \[[^\]]+\]:$`).FindAllString(text, -1)
	if len(headers) < 290 {
		t.Errorf("%d goroutine headers:\n%s", len(headers), text[:min(len(text), 2000)])
	}
	for _, want := range []string{"[chan receive]:", "[sync.Mutex.Lock]:", "[IO wait]:", "\ncreated by main.spawn in goroutine 1\n\t",
		"main.recvInline(...)\n\t", "main.deep(...)\n\t"} {
		if !strings.Contains(text, want) {
			t.Errorf("text output lacks %q", want)
		}
	}

	js, stderr, code := run(t, "dump", pid, "--goroutines", "--json")
	if code != 0 {
		t.Fatalf("--json: exit %d: %s", code, stderr)
	}
	var doc struct {
		PauseUS    *int64                       `json:"pause_us"`
		Goroutines []map[string]json.RawMessage `json:"goroutines"`
	}
	if err := json.Unmarshal([]byte(js), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.PauseUS == nil || *doc.PauseUS < 0 {
		t.Errorf("JSON has no pause_us")
	}
	if len(doc.Goroutines) < 290 {
		t.Fatalf("%d goroutines in JSON", len(doc.Goroutines))
	}
	for _, k := range []string{"id", "status", "wait_reason", "wait_minutes", "thread", "labels", "created_by", "frames"} {
		if _, ok := doc.Goroutines[len(doc.Goroutines)-1][k]; !ok {
			t.Errorf("JSON goroutine lacks %q", k)
		}
	}
	var created struct {
		Function, File string
		Line           int
		Goroutine      int64
	}
	if err := json.Unmarshal(doc.Goroutines[len(doc.Goroutines)-1]["created_by"], &created); err != nil || created.Function == "" || created.Line == 0 {
		t.Errorf("created_by %s: %v", doc.Goroutines[len(doc.Goroutines)-1]["created_by"], err)
	}

	grouped, _, code := run(t, "dump", pid, "--goroutines", "--group")
	if code != 0 || !regexp.MustCompile(`(?m)^goroutine \d+ \[chan receive, \d+ goroutines: [0-9 ]+`).MatchString(grouped) || strings.Count(grouped, "\ngoroutine ") >= len(headers) {
		t.Errorf("--group (exit %d) did not fold stacks:\n%s", code, grouped[:min(len(grouped), 2000)])
	}
	gjs, stderr, code := run(t, "dump", pid, "--goroutines", "--group", "--json")
	var gdoc struct {
		PauseUS *int64 `json:"pause_us"`
		Groups  []struct {
			Count int     `json:"count"`
			IDs   []int64 `json:"ids"`
		} `json:"groups"`
	}
	if code != 0 {
		t.Fatalf("--group --json: exit %d: %s", code, stderr)
	}
	if err := json.Unmarshal([]byte(gjs), &gdoc); err != nil {
		t.Fatal(err)
	}
	sum := 0
	for _, g := range gdoc.Groups {
		sum += g.Count
		if len(g.IDs) != g.Count {
			t.Errorf("group of %d lists %d ids", g.Count, len(g.IDs))
		}
	}
	if len(gdoc.Groups) < 2 || len(gdoc.Groups) >= len(headers) || sum < 290 || gdoc.PauseUS == nil {
		t.Errorf("--group --json: %d groups of %d goroutines, pause_us %v", len(gdoc.Groups), sum, gdoc.PauseUS)
	}

	if _, err := exec.LookPath("gcore"); err != nil {
		t.Skip("no gcore")
	}
	prefix := filepath.Join(t.TempDir(), "core")
	if out, err := exec.Command("gcore", "-o", prefix, pid).CombinedOutput(); err != nil {
		t.Fatalf("gcore: %v\n%s", err, out)
	}
	fromCore, stderr, code := run(t, "dump", "--core", fmt.Sprintf("%s.%s", prefix, pid), "--goroutines")
	if code != 0 {
		t.Fatalf("--core: exit %d: %s", code, stderr)
	}
	if n := len(regexp.MustCompile(`(?m)^goroutine \d+ \[`).FindAllString(fromCore, -1)); n != len(headers) {
		t.Errorf("core: %d goroutines, live: %d", n, len(headers))
	}
}
