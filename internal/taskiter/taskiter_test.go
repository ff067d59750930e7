package taskiter

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
)

func TestMain(m *testing.M) { os.Exit(fixture.Main(m)) }

// park is a Python process with four threads blocked on a lock.
const park = `
import threading
lock = threading.Lock()
lock.acquire()
ts = [threading.Thread(target=lock.acquire) for _ in range(3)]
for t in ts:
    t.start()
print("ready", flush=True)
lock.acquire()
`

// TestThreadsMatchProc: every thread of a process blocked in the kernel
// is read, not running, with the stack pointer, program counter and
// system call number /proc/PID/task/TID/syscall gives, and the context
// switch counts of its status file.
func TestThreadsMatchProc(t *testing.T) {
	testingRoot(t)
	it, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	p := startPark(t)
	ths, err := it.Threads(p.PID)
	if err != nil {
		t.Fatal(err)
	}
	tids, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", p.PID))
	if len(ths) != len(tids) || len(ths) != 4 {
		t.Fatalf("%d threads read, /proc lists %d, want 4", len(ths), len(tids))
	}
	if ths[0].TID != p.PID {
		t.Errorf("first thread %d, want the leader %d", ths[0].TID, p.PID)
	}
	fs := map[uint64]bool{}
	for _, th := range ths {
		if !th.Blocked() {
			t.Errorf("thread %d: state %#x on CPU %v, want blocked", th.TID, th.State, th.OnCPU)
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/syscall", p.PID, th.TID))
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(b))
		if len(f) != 9 {
			t.Fatalf("thread %d: syscall file %q", th.TID, b)
		}
		nr, _ := strconv.ParseUint(f[0], 10, 64)
		sp, _ := strconv.ParseUint(strings.TrimPrefix(f[7], "0x"), 16, 64)
		pc, _ := strconv.ParseUint(strings.TrimPrefix(f[8], "0x"), 16, 64)
		if th.Regs[RegOrigAX] != nr || th.Regs[RegSP] != sp || th.Regs[RegIP] != pc {
			t.Errorf("thread %d: system call %d sp %#x pc %#x, /proc says %d %#x %#x", th.TID,
				th.Regs[RegOrigAX], th.Regs[RegSP], th.Regs[RegIP], nr, sp, pc)
		}
		if sw := switches(t, p.PID, th.TID); sw != th.Switches {
			t.Errorf("thread %d: %d context switches, /proc says %d", th.TID, th.Switches, sw)
		}
		if th.FSBase == 0 || fs[th.FSBase] {
			t.Errorf("thread %d: fs base %#x, want one of its own", th.TID, th.FSBase)
		}
		fs[th.FSBase] = true
	}
	// Another process's threads, and none of a process that is gone.
	if other, err := it.Threads(os.Getpid()); err != nil || len(other) == 0 || other[0].TID != os.Getpid() {
		t.Errorf("this process's threads: %v, %v", other, err)
	}
	if none, err := it.Threads(1 << 30); err != nil || len(none) != 0 {
		t.Errorf("a process that does not exist: %d threads, %v", len(none), err)
	}
}

// testingRoot skips t without root.
func testingRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loading a BPF iterator needs root (CAP_BPF and CAP_PERFMON)")
	}
}

func startPark(t *testing.T) *fixture.Proc { return fixture.Start(t, "/usr/bin/python3", "-c", park) }

func switches(t *testing.T, pid, tid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/status", pid, tid))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.HasSuffix(k, "voluntary_ctxt_switches") {
			x, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			n += x
		}
	}
	return n
}

// TestDecode: records that are not whole are refused, never read past.
func TestDecode(t *testing.T) {
	if _, err := decode(make([]byte, recordSize+3)); err == nil {
		t.Error("a torn record was accepted")
	}
	ths, err := decode(make([]byte, 2*recordSize))
	if err != nil || len(ths) != 2 {
		t.Errorf("two records: %d, %v", len(ths), err)
	}
}

// TestLeaderFirst: once thread ids wrap around, the iterator meets a
// thread of the process before its leader; Threads still lists the
// leader first, the others in the kernel's order.
func TestLeaderFirst(t *testing.T) {
	ths := []Thread{{TID: 6324}, {TID: 6400}, {TID: 17915}, {TID: 17916}}
	got := leaderFirst(ths, 17915)
	want := []int{17915, 6324, 6400, 17916}
	for i, w := range want {
		if got[i].TID != w {
			t.Fatalf("order %v, want %v", got, want)
		}
	}
}
