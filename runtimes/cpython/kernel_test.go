package cpython_test

import (
	"bufio"
	"encoding/binary"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/procmaps"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/runtimes"
	"github.com/rewindstack/rewind/runtimes/cpython"
)

// probeScript prints the interpreter's own view of what Probe finds:
// its thread id, its thread state and _PyEval_EvalFrameDefault's
// address, then spins in Python, holding the GIL.
const probeScript = `import ctypes, threading
api = ctypes.pythonapi
api.PyThreadState_Get.restype = ctypes.c_void_p
ev = ctypes.cast(api._PyEval_EvalFrameDefault, ctypes.c_void_p).value
print(threading.get_native_id(), api.PyThreadState_Get(), ev, flush=True)
while True:
    pass
`

// TestProbe holds Probe and ThreadStates to the interpreter's own view:
// the evaluation loop's address, the thread's state by its id, and for
// 3.11 the GIL holder's thread state read through TStateCurrent while
// the only thread spins.
func TestProbe(t *testing.T) {
	for _, p := range pythons(t) {
		if len(p.cmd) != 1 || strings.Contains(p.name, "embedded") {
			continue
		}
		t.Run(p.name, func(t *testing.T) {
			cmd := exec.Command(p.cmd[0], "-c", probeScript)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { cmd.Process.Kill(); cmd.Wait() }()
			line, err := bufio.NewReader(out).ReadString('\n')
			f := strings.Fields(line)
			if err != nil || len(f) != 3 {
				t.Fatalf("%s: %q, %v", p.name, line, err)
			}
			tid, _ := strconv.Atoi(f[0])
			ts, _ := strconv.ParseUint(f[1], 10, 64)
			eval, _ := strconv.ParseUint(f[2], 10, 64)
			pid := cmd.Process.Pid
			maps, err := procmaps.Read(pid)
			if err != nil {
				t.Fatal(err)
			}
			mem := live.NewProcMemory(pid)
			defer mem.Close()
			rt, err := cpython.Find(maps, mem, runtimes.ProcessFile(pid))
			if err != nil || rt == nil {
				t.Fatalf("Find: %v, %v", rt, err)
			}
			pr, err := rt.Probe()
			if err != nil {
				t.Fatal(err)
			}
			if pr.EvalStart != eval || pr.EvalEnd <= eval {
				t.Errorf("_PyEval_EvalFrameDefault at [%#x, %#x), the interpreter says %#x", pr.EvalStart, pr.EvalEnd, eval)
			}
			states, err := rt.ThreadStates(mem)
			if err != nil || states[tid] != ts {
				t.Errorf("ThreadStates: %v (%v), thread %d's state is %#x", states, err, tid, ts)
			}
			if rt.Version != "3.11" {
				if pr.TStateCurrent != 0 {
					t.Errorf("%s: TStateCurrent %#x, want none", rt.Version, pr.TStateCurrent)
				}
				return
			}
			// The thread takes the GIL back after its write: wait for it.
			var got uint64
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				var b [8]byte
				if err := mem.ReadMemory(pr.TStateCurrent, b[:]); err != nil {
					t.Fatal(err)
				}
				if got = binary.LittleEndian.Uint64(b[:]); got == ts {
					break
				}
			}
			if got != ts {
				t.Errorf("the GIL holder read at %#x is %#x, the spinning thread's state is %#x", pr.TStateCurrent, got, ts)
			}
		})
	}
}
