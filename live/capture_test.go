package live

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/regs"
)

func needAMD64(t testing.TB) {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		t.Skipf("the fixtures' reference stacks are checked on amd64 only, not %s", runtime.GOARCH)
	}
}

// threadsTarget starts the 17-thread fixture (-O2, no frame pointers).
func threadsTarget(t testing.TB) *testProc {
	t.Helper()
	needAMD64(t)
	return startTarget(t, false, fixture.Build(t, "threads", fixture.Variants[3]))
}

// TestCaptureMatchesEuStack captures the threads fixture and checks every
// thread against eu-stack -p, run just before (the threads are blocked,
// so their frames do not change): TIDs, frame 0 PC = RIP, and every
// return address eu-stack unwound found in the stack copy, above SP.
func TestCaptureMatchesEuStack(t *testing.T) {
	tg := threadsTarget(t)
	ref, err := fixture.EuStackPID(t, tg.pid)
	if err != nil {
		t.Fatalf("eu-stack: %v", err)
	}
	tids := waitAllState(t, tg.pid, "S", fixture.ReadyTimeout)
	s := mustCapture(t, tg.pid, Options{})
	checkReleased(t, tg.pid, "S")

	if s.PID != tg.pid || s.Exe != tg.exe {
		t.Errorf("PID %d Exe %q, want %d %q", s.PID, s.Exe, tg.pid, tg.exe)
	}
	var got []int
	for _, th := range s.Threads {
		got = append(got, th.TID)
	}
	if len(got) != 17 || !slices.Equal(got, tids) || got[0] != tg.pid {
		t.Fatalf("captured TIDs %v, /proc lists %v (main %d first)", got, tids, tg.pid)
	}
	if len(ref) != 17 {
		t.Fatalf("eu-stack printed %d threads", len(ref))
	}
	for _, want := range ref {
		th := s.Thread(want.TID)
		if th == nil {
			t.Errorf("thread %d (in eu-stack) not captured", want.TID)
			continue
		}
		checkThread(t, s, th, want)
	}
}

func checkThread(t *testing.T, s *Snapshot, th *Thread, want fixture.Stack) {
	t.Helper()
	if th.Err != nil {
		t.Errorf("thread %d: %v", th.TID, th.Err)
		return
	}
	if name := threadName(s.PID, th.TID); th.Name != name || name == "" {
		t.Errorf("thread %d: Name %q, comm %q", th.TID, th.Name, name)
	}
	if th.Regs.Arch != regs.AMD64 {
		t.Errorf("thread %d: arch %v", th.TID, th.Regs.Arch)
	}
	pc, _ := th.Regs.PC()
	sp, _ := th.Regs.SP()
	for r := 0; r <= regs.AMD64RIP; r++ {
		if !th.Regs.Has(r) {
			t.Errorf("thread %d: register %s unknown", th.TID, regs.AMD64.RegName(r))
		}
	}
	if len(want.Frames) == 0 {
		t.Errorf("thread %d: eu-stack has no frames (%s)", th.TID, want.Err)
		return
	}
	if pc != want.Frames[0].PC {
		t.Errorf("thread %d: RIP %#x, eu-stack frame 0 PC %#x", th.TID, pc, want.Frames[0].PC)
	}
	// The copy starts at the red zone and ends at the end of SP's
	// mapping (every fixture thread's stack is well under MaxStack).
	st := th.Stack
	m := s.FindMapping(sp)
	if m == nil {
		t.Fatalf("thread %d: SP %#x in no mapping", th.TID, sp)
	}
	if st.Addr != sp-redZone || st.Addr+uint64(len(st.Data)) != m.End {
		t.Errorf("thread %d: copy %#x+%#x, want %#x up to the end of %#x-%#x %s", th.TID, st.Addr, len(st.Data), sp-redZone, m.Start, m.End, m.Path)
	}
	// Every return address eu-stack found is stored above SP.
	above := st.Data[min(redZone, len(st.Data)):]
	for i, f := range want.Frames[1:] {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], f.PC)
		found := false
		for off := 0; off+8 <= len(above); off += 8 {
			if bytes.Equal(above[off:off+8], w[:]) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("thread %d: frame %d return address %#x (%s) not in the stack copy", th.TID, i+1, f.PC, f.Func)
		}
	}
	// Mem serves the copy; outside it, the live process.
	buf := make([]byte, 64)
	if err := s.Mem.ReadMemory(sp, buf); err != nil || !bytes.Equal(buf, st.Data[redZone:redZone+64]) {
		t.Errorf("thread %d: Mem at SP: %v %x, copy %x", th.TID, err, buf, st.Data[redZone:redZone+64])
	}
	if err := s.Mem.ReadMemory(pc, buf[:4]); err != nil {
		t.Errorf("thread %d: reading text at PC from the live process: %v", th.TID, err)
	}
}

// TestCapturePause logs the pause over 20 captures of the threads
// fixture. It asserts nothing about time (BenchmarkCapture reports it);
// it checks that every capture is complete and leaves nothing stopped.
func TestCapturePause(t *testing.T) {
	tg := threadsTarget(t)
	var pauses []time.Duration
	for i := 0; i < 20; i++ {
		s := mustCapture(t, tg.pid, Options{})
		if len(s.Threads) != 17 {
			t.Fatalf("capture %d: %d threads", i, len(s.Threads))
		}
		for _, th := range s.Threads {
			if th.Err != nil || len(th.Stack.Data) == 0 {
				t.Fatalf("capture %d: thread %d: %v (%d bytes of stack)", i, th.TID, th.Err, len(th.Stack.Data))
			}
			if th.StopLatency <= 0 || th.StopLatency > s.StopWait {
				t.Fatalf("capture %d: thread %d stopped after %v, all stopped after %v", i, th.TID, th.StopLatency, s.StopWait)
			}
		}
		// A staggered capture (a loaded machine: some thread took
		// longer than MaxPause to stop) resumes the first threads before
		// the last one stops; its Pause is the longest any thread was
		// stopped.
		if s.StopWait <= 0 || !s.Staggered && s.StopWait >= s.Pause {
			t.Fatalf("capture %d: threads stopped after %v of a %v pause", i, s.StopWait, s.Pause)
		}
		pauses = append(pauses, s.Pause)
		checkReleased(t, tg.pid, "S")
	}
	lo, med, hi := pauseStats(pauses)
	t.Logf("pause over %d captures of 17 threads: min %v median %v max %v", len(pauses), lo, med, hi)
}

func pauseStats(d []time.Duration) (lo, med, hi time.Duration) {
	d = slices.Clone(d)
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[0], d[len(d)/2], d[len(d)-1]
}

// BenchmarkCapture captures the 17-thread fixture: ns/op is the wall time
// of a capture, pause_us the median time the threads were stopped
// (pause_max_us the longest).
func BenchmarkCapture(b *testing.B) {
	tg := threadsTarget(b)
	var pauses []time.Duration
	for b.Loop() {
		s, err := Capture(tg.pid, Options{})
		if err != nil {
			b.Fatal(err)
		}
		pauses = append(pauses, s.Pause)
	}
	_, med, hi := pauseStats(pauses)
	b.ReportMetric(float64(med.Nanoseconds())/1e3, "pause_us")
	b.ReportMetric(float64(hi.Nanoseconds())/1e3, "pause_max_us")
}

// TestWithStopped checks that fn sees the registers Capture sees, reads
// memory through s.Mem, runs while every thread is in a ptrace stop, and
// that the threads run again afterwards, also when fn fails or panics.
func TestWithStopped(t *testing.T) {
	tg := threadsTarget(t)
	ref := mustCapture(t, tg.pid, Options{})
	checkReleased(t, tg.pid, "S")
	called := false
	err := WithStopped(tg.pid, Options{}, func(s *Snapshot) error {
		called = true
		ts, _ := tasks(tg.pid)
		for _, x := range ts {
			if x.state != 't' || tgidOf(x.tracer) != os.Getpid() {
				t.Errorf("during fn: thread %d in state %c traced by %d, want t by %d", x.tid, x.state, x.tracer, os.Getpid())
			}
		}
		if len(s.Threads) != len(ref.Threads) || len(s.Maps) == 0 {
			t.Errorf("%d threads and %d maps, Capture saw %d threads", len(s.Threads), len(s.Maps), len(ref.Threads))
		}
		for i, th := range s.Threads {
			want := &ref.Threads[i]
			if th.TID != want.TID || th.Err != nil || th.Regs.String() != want.Regs.String() {
				t.Errorf("thread %d: %v %s, Capture: %d %s", th.TID, th.Err, th.Regs.String(), want.TID, want.Regs.String())
				continue
			}
			if len(th.Stack.Data) != 0 || th.Name != want.Name {
				t.Errorf("thread %d: stack copied (%d bytes) or name %q != %q", th.TID, len(th.Stack.Data), th.Name, want.Name)
			}
			// The stack above SP of a blocked thread is what Capture
			// copied, read live now.
			sp, _ := th.Regs.SP()
			n := len(want.Stack.Data) - redZone
			live := make([]byte, n)
			if err := s.Mem.ReadMemory(sp, live); err != nil {
				t.Errorf("thread %d: %v", th.TID, err)
			} else if !bytes.Equal(live[:256], want.Stack.Data[redZone:redZone+256]) {
				t.Errorf("thread %d: the stack read live differs from the copy", th.TID)
			}
		}
		return nil
	})
	if err != nil || !called {
		t.Fatalf("WithStopped: %v (fn called: %v)", err, called)
	}
	checkReleased(t, tg.pid, "S")

	errFn := errors.New("fn failed")
	if err := WithStopped(tg.pid, Options{}, func(*Snapshot) error { return errFn }); err != errFn {
		t.Errorf("WithStopped returned %v, want fn's error", err)
	}
	checkReleased(t, tg.pid, "S")

	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want fn's panic", r)
			}
		}()
		WithStopped(tg.pid, Options{}, func(*Snapshot) error { panic("boom") })
		t.Errorf("WithStopped returned after fn panicked")
	}()
	checkReleased(t, tg.pid, "S")
}

// TestSelectedThreads checks Options.Threads: only the selected threads
// are stopped (the others keep running) and returned; an unknown TID comes
// back with Err.
func TestSelectedThreads(t *testing.T) {
	tg := threadsTarget(t)
	pick := []int{tg.tids[3], tg.tids[0], 1<<22 + 1}
	err := WithStopped(tg.pid, Options{Threads: pick}, func(s *Snapshot) error {
		ts, _ := tasks(tg.pid)
		for _, x := range ts {
			want := byte('S')
			if x.tid == pick[0] || x.tid == pick[1] {
				want = 't'
			}
			if x.state != want {
				t.Errorf("thread %d in state %c, want %c", x.tid, x.state, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checkReleased(t, tg.pid, "S")
	s := mustCapture(t, tg.pid, Options{Threads: pick})
	checkReleased(t, tg.pid, "S")
	if len(s.Threads) != 3 || s.Threads[0].TID != tg.pid || s.Threads[1].TID != pick[0] || s.Threads[2].TID != pick[2] {
		t.Fatalf("threads %+v", s.Threads)
	}
	for _, th := range s.Threads[:2] {
		if th.Err != nil || len(th.Stack.Data) == 0 {
			t.Errorf("thread %d: %v, %d bytes", th.TID, th.Err, len(th.Stack.Data))
		}
	}
	if s.Threads[2].Err == nil {
		t.Errorf("thread %d: no error for a TID that is not in the process", pick[2])
	}
	t.Logf("unknown TID: %v", s.Threads[2].Err)
}

// TestMaxStack checks that MaxStack bounds each copy, and that a negative
// value copies nothing.
func TestMaxStack(t *testing.T) {
	tg := threadsTarget(t)
	s := mustCapture(t, tg.pid, Options{MaxStack: 1000})
	for _, th := range s.Threads {
		sp, _ := th.Regs.SP()
		if th.Err != nil || len(th.Stack.Data) != 1000 || th.Stack.Addr != sp-redZone {
			t.Errorf("thread %d: %v, %d bytes at %#x", th.TID, th.Err, len(th.Stack.Data), th.Stack.Addr)
		}
	}
	s = mustCapture(t, tg.pid, Options{MaxStack: -1})
	for _, th := range s.Threads {
		if th.Err != nil || len(th.Stack.Data) != 0 || !th.Regs.Has(regs.AMD64RSP) {
			t.Errorf("thread %d: %v, %d bytes", th.TID, th.Err, len(th.Stack.Data))
		}
	}
	checkReleased(t, tg.pid, "S")
}

// TestGroupStopped captures a process stopped by SIGSTOP: it is captured
// like any other, and stays stopped afterwards (detaching must not resume
// what the user stopped).
func TestGroupStopped(t *testing.T) {
	tg := threadsTarget(t)
	before := mustCapture(t, tg.pid, Options{})
	if err := syscall.Kill(tg.pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitAllState(t, tg.pid, "T", fixture.ReadyTimeout)
	s := mustCapture(t, tg.pid, Options{})
	for i, th := range s.Threads {
		if th.Err != nil || !sameOrRestarted(before.Threads[i].Regs, th.Regs) {
			t.Errorf("thread %d: %v %s, running it was %s", th.TID, th.Err, th.Regs.String(), before.Threads[i].Regs.String())
		}
	}
	checkReleased(t, tg.pid, "T")
	syscall.Kill(tg.pid, syscall.SIGCONT)
	waitAllState(t, tg.pid, "S", fixture.ReadyTimeout)
}

// sameOrRestarted says whether after holds the registers of before, or
// those of the system call before was in once the SIGSTOP's delivery
// prepared its restart: before's rax an -ERESTART* code (-512 to -516),
// after's rip back on the syscall instruction (2 bytes) and rax the call
// to make again (the call's number, or restart_syscall's).
func sameOrRestarted(before, after regs.Regs) bool {
	if before.String() == after.String() {
		return true
	}
	if before.Arch != regs.AMD64 {
		return false
	}
	rax, _ := before.Get(regs.AMD64RAX)
	ip, _ := before.Get(regs.AMD64RIP)
	if code := -int64(rax); code < 512 || code > 516 {
		return false
	}
	b := before
	b.Set(regs.AMD64RIP, ip-2)
	a := after
	v, _ := after.Get(regs.AMD64RAX)
	b.Set(regs.AMD64RAX, v)
	return a.String() == b.String()
}

// TestAlreadyTraced: a thread another tracer holds cannot be seized
// (EPERM), and the error says who holds it. Here the other tracer is a
// WithStopped of this very process.
func TestAlreadyTraced(t *testing.T) {
	tg := threadsTarget(t)
	err := WithStopped(tg.pid, Options{}, func(*Snapshot) error {
		_, err := Capture(tg.pid, Options{})
		if !errors.Is(err, ErrTraced) || !strings.Contains(err.Error(), "captured by this process") {
			t.Errorf("second capture: %v, want ErrTraced saying this process holds it", err)
		}
		t.Logf("second capture: %v", err)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checkReleased(t, tg.pid, "S")
}

// TestWithStoppedDeadline: a function blocked on I/O that never
// completes (opening a FIFO no one writes) cannot keep the threads
// stopped beyond MaxStopped: they are resumed and WithStopped fails.
func TestWithStoppedDeadline(t *testing.T) {
	tg := threadsTarget(t)
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	defer func() {
		// Let the blocked open finish so the goroutine ends.
		if f, err := os.OpenFile(fifo, os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	}()
	begin := time.Now()
	err := WithStopped(tg.pid, Options{MaxStopped: 300 * time.Millisecond}, func(*Snapshot) error {
		f, err := os.Open(fifo)
		if err == nil {
			f.Close()
		}
		return err
	})
	if !errors.Is(err, ErrStoppedTooLong) {
		t.Fatalf("WithStopped = %v, want ErrStoppedTooLong", err)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Fatalf("WithStopped returned after %v", d)
	}
	checkReleased(t, tg.pid, "S")
}

// TestWithStoppedGoexit: runtime.Goexit in fn (t.FailNow does it) ends
// the caller's goroutine as it did when fn ran on it, with the threads
// resumed.
func TestWithStoppedGoexit(t *testing.T) {
	tg := threadsTarget(t)
	returned := make(chan bool, 1)
	go func() {
		defer func() { returned <- false }()
		WithStopped(tg.pid, Options{}, func(*Snapshot) error { runtime.Goexit(); return nil })
		returned <- true
	}()
	if <-returned {
		t.Fatal("WithStopped returned after fn called runtime.Goexit")
	}
	checkReleased(t, tg.pid, "S")
}

// TestMapsBeforePause: with the maps read just before the pause, every
// thread's stack is still copied to the end of its mapping and matches
// eu-stack's frames, and the snapshot has the process's mappings.
func TestMapsBeforePause(t *testing.T) {
	tg := threadsTarget(t)
	ref, err := fixture.EuStackPID(t, tg.pid)
	if err != nil {
		t.Fatalf("eu-stack: %v", err)
	}
	waitAllState(t, tg.pid, "S", fixture.ReadyTimeout)
	s := mustCapture(t, tg.pid, Options{MapsBeforePause: true})
	checkReleased(t, tg.pid, "S")
	if len(s.Maps) == 0 {
		t.Fatal("no mappings")
	}
	for _, want := range ref {
		th := s.Thread(want.TID)
		if th == nil || len(th.Stack.Data) == 0 {
			t.Errorf("thread %d: no stack copy", want.TID)
			continue
		}
		checkThread(t, s, th, want)
	}
}
