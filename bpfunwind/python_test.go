package bpfunwind

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// pythons are the interpreters the CPython walk is held to: Debian's
// 3.11 (the issue's), and pyenv's 3.12 (libpython, entry frames) and
// 3.13 (_Py_DebugOffsets) where the machine has them.
var pythons = []string{"/usr/bin/python3.11", "/root/.pyenv/versions/3.12.1/bin/python3.12", "/root/.pyenv/versions/3.13.0/bin/python3.13"}

// TestPythonFrames samples two CPU-bound threads of each Python, each
// spinning in a known call chain that the program reports itself (from its
// frame objects: co_qualname, file, line): the kernel's walk of the interpreter
// frames must show each thread's spinning function in at least 90% of
// that thread's samples, and every Python stack it gives must be the
// program's own view (the leaf's line anywhere in the spinning function's
// loop, the callers' lines exactly).
func TestPythonFrames(t *testing.T) {
	for _, py := range pythons {
		t.Run(filepath.Base(py), func(t *testing.T) {
			if _, err := os.Stat(py); err != nil {
				t.Skipf("%s not installed", py)
			}
			pythonFrames(t, py, false)
		})
	}
}

// TestPythonFramesNewThread: a thread started after the unwinder read the
// interpreter's thread list is walked from its first samples on (3.11:
// the GIL holder; 3.12+: the program asks for the list again), not from
// the next Read: the spinning functions must be in 90% of the samples
// from the start.
func TestPythonFramesNewThread(t *testing.T) {
	for _, py := range pythons {
		t.Run(filepath.Base(py), func(t *testing.T) {
			if _, err := os.Stat(py); err != nil {
				t.Skipf("%s not installed", py)
			}
			pythonFrames(t, py, true)
		})
	}
}

// pythonFrames runs testdata/pyhot.py with python and compares the
// kernel's walks of its Python frames with its own view. late: the
// unwinder is loaded before the program starts its threads, and the
// stacks of their start (not the view yet) are counted but not compared.
func pythonFrames(t *testing.T, python string, late bool) {
	script, _ := filepath.Abs("testdata/pyhot.py")
	cmd := exec.Command(python, script)
	var u *Unwinder
	if late {
		cmd.Args = append(cmd.Args, "late")
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if late {
		u = load(t, cmd.Process.Pid)
		if err := u.OnCPU(999); err != nil {
			t.Fatal(err)
		}
		if _, err := in.Write([]byte("go\n")); err != nil {
			t.Fatal(err)
		}
	}
	// The program's own view of each thread: tid -> frames, innermost
	// first, "function:file:line".
	views := map[int][]string{}
	r := bufio.NewReader(out)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("%s: %v before ready", script, err)
		}
		f := strings.Fields(line)
		if len(f) == 1 && f[0] == "ready" {
			break
		}
		if len(f) < 3 || f[0] != "thread" {
			t.Fatalf("%s: unexpected line %q", script, line)
		}
		tid, _ := strconv.Atoi(f[1])
		views[tid] = f[2:]
	}
	if len(views) != 2 {
		t.Fatalf("%d thread views, want 2", len(views))
	}
	pid := cmd.Process.Pid
	if !late {
		u = load(t, pid)
		if err := u.OnCPU(999); err != nil {
			t.Fatal(err)
		}
	}
	samples := map[int]uint64{} // per thread
	withHot := map[int]uint64{}
	deadline := time.Now().Add(time.Minute)
	for (samples[firstKey(views, 0)] < 300 || samples[firstKey(views, 1)] < 300) && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		stacks, err := u.Read()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range stacks {
			view, ok := views[s.TID]
			if s.PID != pid || !ok || s.OffCPU {
				continue
			}
			samples[s.TID] += s.Value
			if len(s.Interp) == 0 {
				continue
			}
			got := make([]string, len(s.Interp[0].Frames))
			for i, f := range s.Interp[0].Frames {
				got[i] = fmt.Sprintf("%s:%s:%d", f.Function, f.File, f.Line)
			}
			if err := sameAsView(got, view); err != nil {
				if late {
					continue // (the thread's start, maybe)
				}
				t.Errorf("thread %d: kernel walk %v, the program's view %v: %v", s.TID, got, view, err)
				continue
			}
			withHot[s.TID] += s.Value
		}
	}
	for tid, view := range views {
		n, hot := samples[tid], withHot[tid]
		t.Logf("thread %d: %s in %d of %d samples", tid, fnOf(view[0]), hot, n)
		if n < 300 {
			t.Errorf("thread %d: %d samples in a minute, want 300", tid, n)
		}
		if n > 0 && float64(hot) < 0.9*float64(n) {
			t.Errorf("thread %d: %s in %d of %d samples (%.1f%%), want at least 90%%", tid, fnOf(view[0]), hot, n, 100*float64(hot)/float64(n))
		}
	}
}

// firstKey returns the i-th smallest key of views (a stable order).
func firstKey(views map[int][]string, i int) int {
	lo, hi := -1, -1
	for k := range views {
		if lo < 0 || k < lo {
			lo = k
		}
		if hi < 0 || k > hi {
			hi = k
		}
	}
	if i == 0 {
		return lo
	}
	return hi
}

func fnOf(frame string) string { return frame[:strings.IndexByte(frame, ':')] }

// sameAsView compares a walked Python stack with the program's view: the
// same frames, the callers' lines exact, the leaf's within its loop (from
// the function's first line to the line the program reported from).
func sameAsView(got, view []string) error {
	if len(got) != len(view) {
		return fmt.Errorf("%d frames, want %d", len(got), len(view))
	}
	for i := 1; i < len(got); i++ {
		if got[i] != view[i] {
			return fmt.Errorf("frame %d is %s, want %s", i, got[i], view[i])
		}
	}
	gi, vi := strings.LastIndexByte(got[0], ':'), strings.LastIndexByte(view[0], ':')
	if got[0][:gi] != view[0][:vi] {
		return fmt.Errorf("leaf %s, want %s", got[0], view[0])
	}
	line, _ := strconv.Atoi(got[0][gi+1:])
	last, _ := strconv.Atoi(view[0][vi+1:])
	if line < last-7 || line > last {
		return fmt.Errorf("leaf line %d outside the loop (lines %d-%d)", line, last-7, last)
	}
	return nil
}
