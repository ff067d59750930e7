package agent

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/testutil/perftest"
	"github.com/rewindstack/rewind/profiles"
)

// The long churn test is not part of go test ./...: it takes ten minutes
// and both cores.
var (
	long       = flag.Bool("rewind.long", false, "run the long tests (TestAgentChurnLong); also REWIND_LONG=1")
	longLength = flag.Duration("rewind.long-for", 10*time.Minute, "how long TestAgentChurnLong profiles; also REWIND_LONG_FOR")
)

// longFor returns how long the long test runs, skipping it unless asked.
func longFor(t *testing.T) time.Duration {
	t.Helper()
	if !*long && os.Getenv("REWIND_LONG") != "1" {
		t.Skip("a long test: run with -rewind.long or REWIND_LONG=1 (-rewind.long-for or REWIND_LONG_FOR to shorten it)")
	}
	d := *longLength
	if s := os.Getenv("REWIND_LONG_FOR"); s != "" {
		v, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("REWIND_LONG_FOR: %v", err)
		}
		d = v
	}
	return d
}

// cxxUnit is a translation unit heavy in std headers: cc1plus spends
// seconds on it at -O1, so that samples land deep in the compiler. The
// number makes each unit's code its own.
func cxxUnit(i int) string {
	return fmt.Sprintf(`#include <algorithm>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

std::map<std::string, int> count_%[1]d(const std::vector<std::string>& lines) {
	std::map<std::string, int> out;
	std::regex word("[a-z]+%[1]d");
	for (auto& l : lines)
		for (std::sregex_iterator it(l.begin(), l.end(), word), end; it != end; ++it)
			out[it->str()]++;
	return out;
}

int print_%[1]d(const std::vector<std::string>& lines) {
	auto m = count_%[1]d(lines);
	std::unordered_map<int, std::vector<std::string>> by;
	for (auto& [k, v] : m) by[v].push_back(k);
	std::ostringstream os;
	for (auto& [n, ws] : by) { std::sort(ws.begin(), ws.end()); os << n << ws.size(); }
	std::cout << os.str() << std::endl;
	return (int)m.size();
}
`, i)
}

// cUnit is a C translation unit: the build's C sources run cc1, a
// compiler as large as cc1plus, so that the two do not fit in the rows
// map together and files are evicted for each other all along.
func cUnit(i int) string {
	return fmt.Sprintf(`#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
int sort_%[1]d(char **v, int n) {
	qsort(v, n, sizeof *v, cmp);
	for (int i = 0; i < n; i++) printf("%%s\n", v[i]);
	return n;
}
`, i)
}

// cxxBuild compiles units again and again in jobs loops until ctx is done
// (a build that keeps starting compilers), and returns how many
// compilations finished once every compiler is gone. Each compiler runs
// in a process group of its own, killed whole when ctx ends, and with
// TMPDIR in dir (with -pipe it writes no temporary files anyway).
func cxxBuild(ctx context.Context, t *testing.T, dir string, units, jobs int) func() int {
	var srcs []string
	for i := range units {
		name, text := fmt.Sprintf("u%d.cc", i), cxxUnit(i)
		if i%4 == 3 {
			name, text = fmt.Sprintf("u%d.c", i), cUnit(i)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, p)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	for j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := j; ctx.Err() == nil; k += jobs {
				src := srcs[k%len(srcs)]
				cc := "g++"
				if strings.HasSuffix(src, ".c") {
					cc = "gcc"
				}
				cmd := exec.CommandContext(ctx, cc, "-O1", "-pipe", "-c", "-o", src+fmt.Sprint(j)+".o", src)
				cmd.Env = append(os.Environ(), "TMPDIR="+dir)
				cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
				cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
				out, err := cmd.CombinedOutput()
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					t.Errorf("%s %s: %v\n%s", cc, src, err, out)
					return
				}
				mu.Lock()
				done++
				mu.Unlock()
			}
		}()
	}
	return func() int {
		wg.Wait()
		return done
	}
}

// periodLine matches the agent's period line's rows and evictions.
var periodLine = regexp.MustCompile(`period (\d+) .*: (\d+) samples .*rows (\d+) of (\d+) used \(largest free run (\d+)\), (\d+) files evicted; (\d+) of \d+ file indexes`)

// churnLog keeps the period lines' rows and evictions.
type churnLog struct {
	t         *testing.T
	mu        sync.Mutex
	evictions int
	used      []string // rows used/largest free run/file indexes, per period
}

func (l *churnLog) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimSpace(string(p)), "\n") {
		l.t.Log(line)
		if m := periodLine.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[6])
			l.mu.Lock()
			l.evictions += n
			l.used = append(l.used, m[3]+"/"+m[5]+"/"+m[7])
			l.mu.Unlock()
		}
	}
	return len(p), nil
}

// TestAgentChurnLong profiles the whole host with the kernel unwinder for
// ten minutes beside a build that starts a compiler every few seconds, C++
// (cc1plus) and C (cc1), which with the host's files do not fit in the
// rows map: the files' rows must come and go (evictions) while at least
// 95% of the build's kernel walks still reach a thread root.
func TestAgentChurnLong(t *testing.T) {
	d := longFor(t)
	if !kernelPermitted() {
		t.Skip("the in-kernel unwinder needs root")
	}
	perftest.RequirePerfEvent(t)
	for _, cc := range []string{"g++", "gcc"} {
		if _, err := exec.LookPath(cc); err != nil {
			t.Skipf("the build needs %s: %v", cc, err)
		}
	}
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &collect{}
	log := &churnLog{t: t}
	cfg := Config{Exporters: []Exporter{c}, Period: 30 * time.Second, UnwindIn: UnwindKernel, Log: log,
		Warn: func(s string) { t.Log("warning: " + s) }}
	var wait func() int
	cfg.Ready = func() {
		wait = cxxBuild(ctx, t, dir, 8, 2)
		time.AfterFunc(d, cancel)
	}
	if err := Run(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	cancel()
	if wait == nil {
		t.Fatal("the agent never got ready")
	}
	compiled := wait()
	reasons, walks := kernelWalks(c.got)
	finished := 0
	for r, n := range reasons {
		if walkFinished(r) {
			finished += n
		}
	}
	built, complete := buildWalks(c.got)
	t.Logf("%d compilations; the build's kernel walks: %d, complete %d (%.1f%%); the host's: %d, finished %d (%.1f%%), by end: %v; rows used/largest free run/file indexes per period: %s; files evicted: %d",
		compiled, built, complete, pct(complete, built), walks, finished, pct(finished, walks), reasons, strings.Join(log.used, " "), log.evictions)
	if compiled == 0 || built == 0 {
		t.Fatalf("the build compiled %d units and its processes had %d kernel walks: nothing measured", compiled, built)
	}
	if log.evictions == 0 {
		t.Errorf("no file was evicted from the rows map: the run did not exercise reclaim")
	}
	// The build's walks, not the host's: other processes' may end for
	// reasons of their own (a JIT's code has no rows).
	if complete*100 < built*95 {
		t.Errorf("%d of %d kernel walks of the build's processes reached a root (%.1f%%), want >= 95%%", complete, built, pct(complete, built))
	}
}

func pct(n, of int) float64 { return 100 * float64(n) / float64(max(of, 1)) }

// buildComm names the build's processes: the drivers, the compilers, the
// assembler.
var buildComm = regexp.MustCompile(`^(g\+\+|gcc|cc1plus|cc1|as)$`)

// buildWalks counts the CPU samples of the build's processes that have a
// user stack, and those whose stack reaches a thread root.
func buildWalks(ps []*Period) (walks, complete int) {
	for _, p := range ps {
		if p.Type != TypeCPU {
			continue
		}
		for _, s := range p.Profile.Stacks {
			if s.KernelOnly || !buildComm.MatchString(s.Comm) {
				continue
			}
			n := int(s.Samples())
			walks += n
			if s.Complete {
				complete += n
			}
		}
	}
	return walks, complete
}

// kernelWalks counts the end reasons of the host's kernel walks of user
// stacks over every CPU period (each profile's kernel fidelity).
func kernelWalks(ps []*Period) (map[string]int, int) {
	reasons := map[string]int{}
	walks := 0
	for _, p := range ps {
		if p.Type != TypeCPU {
			continue
		}
		for _, f := range p.Profile.Fidelity {
			if f.Method != profiles.KernelWalk {
				continue
			}
			for r, n := range f.Reasons {
				reasons[r] += n
				walks += n
			}
		}
	}
	return reasons, walks
}

// walkFinished reports whether a kernel walk ending so found the whole
// stack: a root (also across a Go stack switch), an undefined return
// address, or a zero frame pointer or return address.
func walkFinished(reason string) bool {
	base, _, _ := strings.Cut(reason, "+")
	return base == "root" || base == "ra-undefined" || base == "outermost"
}
