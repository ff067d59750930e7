package clitest

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
)

// startPython runs runtimes/cpython/testdata/park.py under exe and returns it with
// its report's lines (sys._current_frames(): "THREAD tid", then
// "qualname\tfile\tline" a frame).
func startPython(t *testing.T, exe string) (*fixture.Proc, []string) {
	if _, err := os.Stat(exe); err != nil {
		t.Skipf("no %s: %v", exe, err)
	}
	script, err := filepath.Abs("../../../runtimes/cpython/testdata/park.py")
	if err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(t.TempDir(), "report")
	p := fixture.Start(t, exe, script, report)
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	return p, strings.Split(strings.TrimSuffix(string(b), "\nEND\n"), "\n")
}

// TestDumpPython: rewind dump of a CPython process, live and from its
// gcore core, prints every Python frame sys._current_frames() gives, as
// "qualname (file:line) [python]" in its thread, just above the
// evaluation loop's frame; --json has them with null pc, module and
// offset; --no-python leaves them out.
func TestDumpPython(t *testing.T) {
	p, report := startPython(t, "/usr/bin/python3.11")
	core := fixture.Gcore(t, p)
	for _, args := range [][]string{{"dump", strconv.Itoa(p.PID)}, {"dump", "--core", core}} {
		out, errOut, code := run(t, args...)
		if code != 0 || strings.Contains(errOut, "Python") {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		threads := map[string]string{} // tid → its text
		for _, sec := range strings.Split(out, "\nTID ")[1:] {
			tid, _, _ := strings.Cut(sec, ":")
			threads[tid] = sec
		}
		tid := ""
		for _, line := range report {
			if s, ok := strings.CutPrefix(line, "THREAD "); ok {
				tid = s
				continue
			}
			f := strings.Split(line, "\t")
			want := f[0] + " (" + f[1] + ":" + f[2] + ") [python]"
			if !strings.Contains(threads[tid], want) {
				t.Errorf("%v: thread %s has no %q:\n%s", args, tid, want, threads[tid])
			}
		}
		sc := bufio.NewScanner(strings.NewReader(out))
		prevPy := false
		for sc.Scan() {
			py := strings.HasSuffix(sc.Text(), "[python]")
			if prevPy && !py && !strings.Contains(sc.Text(), " _PyEval_EvalFrameDefault+") {
				t.Errorf("%v: a Python frame is followed by %q", args, sc.Text())
			}
			prevPy = py
		}
	}
	out, errOut, code := run(t, "dump", "--json", strconv.Itoa(p.PID))
	if code != 0 {
		t.Fatalf("--json: exit %d: %s", code, errOut)
	}
	var rep struct {
		Threads []struct {
			Frames []map[string]any `json:"frames"`
		} `json:"threads"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, th := range rep.Threads {
		for _, f := range th.Frames {
			if f["method"] == "python" {
				n++
				if f["pc"] != nil || f["module"] != nil || f["offset"] != nil || f["function"] == nil || f["line"] == nil {
					t.Errorf("--json: Python frame %v", f)
				}
			}
		}
	}
	if want := len(report) - 5; n != want {
		t.Errorf("--json: %d Python frames, want %d", n, want)
	}
	out, _, _ = run(t, "dump", "--no-python", strconv.Itoa(p.PID))
	if strings.Contains(out, "[python]") {
		t.Errorf("--no-python printed Python frames")
	}
}

// TestDumpPythonUnknown: a CPython whose frames rewind cannot read (3.10,
// before the frame chains it knows) is dumped with its native frames and
// one line saying so.
func TestDumpPythonUnknown(t *testing.T) {
	p, _ := startPython(t, "/root/.pyenv/versions/3.10.13/bin/python3.10")
	out, errOut, code := run(t, "dump", strconv.Itoa(p.PID))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.Contains(out, "[python]") || !strings.Contains(out, "_PyEval_EvalFrameDefault") {
		t.Errorf("want native frames only:\n%s", out)
	}
	if n := strings.Count(errOut, "CPython 3.10"); n != 1 || strings.Count(errOut, "\n") != 1 {
		t.Errorf("want one line about CPython 3.10 on stderr, got:\n%s", errOut)
	}
}

// TestDumpPythonChroot: rewind dump of Debian sid's python3.14, run
// chrooted (its files under another root), prints every frame
// sys._current_frames() gives, each activation's above a native frame
// although the binary exports no _PyEval_EvalFrameDefault.
func TestDumpPythonChroot(t *testing.T) {
	if os.Getenv("REWIND_CHROOT_DIR") == "" {
		// TestMain points the cache at a fresh directory: the chroots
		// are the user's, built once (.ci/run prebuilds them).
		if dir, err := os.UserCacheDir(); err == nil {
			t.Setenv("REWIND_CHROOT_DIR", filepath.Join(dir, "rewind", "chroots"))
		}
	}
	c := fixture.PythonChroot(t, "sid")
	script, err := os.ReadFile("../../../runtimes/cpython/testdata/park.py")
	if err != nil {
		t.Fatal(err)
	}
	in := c.WriteFile("park.py", script)
	report := c.TempDir() + "/report"
	p := fixture.StartCmd(t, c.Command(c.Python, in, report))
	b, err := os.ReadFile(c.HostPath(report))
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, "dump", strconv.Itoa(p.PID))
	if code != 0 || strings.Contains(errOut, "Python") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\nEND\n"), "\n") {
		if strings.HasPrefix(line, "THREAD ") {
			continue
		}
		f := strings.Split(line, "\t")
		if want := f[0] + " (" + f[1] + ":" + f[2] + ") [python]"; !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
		n++
	}
	lines := strings.Split(out, "\n")
	got := 0
	for i, l := range lines {
		if strings.HasSuffix(l, "[python]") {
			got++
			if next := lines[i+1]; strings.HasPrefix(strings.TrimSpace(next), "end:") {
				t.Errorf("a Python frame after every native frame: %q", l)
			}
		}
	}
	if got != n {
		t.Errorf("%d Python frames, the program reported %d", got, n)
	}
}
