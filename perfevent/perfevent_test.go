package perfevent_test

import (
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/testutil/perftest"
	"github.com/rewindstack/rewind/perfdata"
	"github.com/rewindstack/rewind/perfevent"
	"github.com/rewindstack/rewind/session"
)

// TestCommandAt999Hz records a command from its exec at 999 Hz: every
// sample must come from the command's process and the threads the kernel
// announced with FORK records (in any buffer, read in any order), and none
// may be lost.
func TestCommandAt999Hz(t *testing.T) {
	perftest.RequirePerfEvent(t)
	exe := perftest.BuildCPU(t, "-fomit-frame-pointer")
	rec, cmd, done := startCommand(t, []string{exe, "1", "3"}, perfevent.Options{Freq: 999})
	pid := uint32(cmd.Process.Pid)
	threads := map[uint32]bool{pid: true}
	var samples, withStack int
	var sawExec, sawExeMmap bool
	tids := map[uint32]int{}
	drain(t, rec, done, func(r *perfdata.Record) {
		switch r.Type {
		case perfdata.RecordFork:
			if r.Task.PID == pid {
				threads[r.Task.TID] = true
			}
		case perfdata.RecordComm:
			if r.Comm.Exec && r.Comm.PID == pid {
				sawExec = true
			}
		case perfdata.RecordMmap2:
			if r.Mmap.Filename == exe && r.Mmap.Executable {
				sawExeMmap = true
			}
		case perfdata.RecordSample:
			s := r.Sample
			samples++
			tids[s.TID]++
			if s.PID != pid {
				t.Errorf("sample from pid %d tid %d, want the command (pid %d) and its threads", s.PID, s.TID, pid)
			}
			if s.RegsABI == perfdata.RegsABI64 && len(s.Stack) > 0 {
				withStack++
			}
			if len(s.Stack) > 16<<10 {
				t.Errorf("stack copy of %d bytes, asked for 16 KiB", len(s.Stack))
			}
		}
	})
	t.Logf("%d samples (%d with user stack), threads %v, lost %d", samples, withStack, tids, rec.Lost())
	// The threads are checked once everything is read: each CPU has its
	// own ring buffer, so a thread's first sample can be read before the
	// FORK record that announced it, which another CPU wrote.
	for tid := range tids {
		if !threads[tid] {
			t.Errorf("samples from tid %d, which no FORK record of the command announced", tid)
		}
	}
	if !sawExec || !sawExeMmap {
		t.Errorf("missing the exec's COMM (%v) or the executable's MMAP2 (%v): not enabled on exec?", sawExec, sawExeMmap)
	}
	// 1 s of 4 busy threads at 999 Hz: up to 2000 samples on 2 idle
	// CPUs, far fewer on a loaded machine (cpu-clock counts only the time
	// the threads run).
	if samples < 100 {
		t.Errorf("%d samples in 1 s of 4 busy threads at 999 Hz, want >= 100", samples)
	}
	if len(tids) < 4 {
		t.Errorf("samples from %d threads, want main + 3 workers created after exec", len(tids))
	}
	// None may be lost, but on a busy machine (other test packages
	// running beside this one): there the reader may wait for a CPU
	// long enough for a 4 MiB ring to fill, and a tenth is allowed.
	if busy, load := perftest.Busy(); rec.Lost() != 0 && (!busy || rec.Lost()*10 > uint64(samples)) {
		t.Errorf("%d records lost at 999 Hz (load average %s)", rec.Lost(), load)
	}
	if withStack < samples*9/10 {
		t.Errorf("%d of %d samples carry user registers and stack", withStack, samples)
	}
}

func TestAttachPID(t *testing.T) {
	perftest.RequirePerfEvent(t)
	exe := perftest.BuildCPU(t, "-fomit-frame-pointer")
	// The program sleeps 0.3 s in a shell first, so the threads are
	// created after rewind attached.
	cmd := exec.Command("/bin/sh", "-c", "sleep 0.3; exec "+exe+" 1 2")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	rec, err := perfevent.AttachPID(cmd.Process.Pid, perfevent.Options{Freq: 499})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	tids := map[uint32]int{}
	drain(t, rec, done, func(r *perfdata.Record) {
		if r.Type == perfdata.RecordSample {
			tids[r.Sample.TID]++
		}
	})
	t.Logf("samples per thread: %v", tids)
	if len(tids) < 3 {
		t.Errorf("samples from %d threads, want main and 2 workers created after attaching", len(tids))
	}
}

func TestAttachErrors(t *testing.T) {
	if _, err := perfevent.AttachPID(1<<30, perfevent.Options{}); err == nil || !strings.Contains(err.Error(), "no process") {
		t.Errorf("attaching a missing process: %v", err)
	}
	var nr *perfevent.NotRunnableError
	if _, _, err := perfevent.StartCommand([]string{"/nonexistent/prog"}, perfevent.Options{}); !errors.As(err, &nr) || nr.ExitStatus() != 127 ||
		err.Error() != "cannot run /nonexistent/prog: no such file" {
		t.Errorf("starting a missing program: %v", err)
	}
	if _, _, err := perfevent.StartCommand([]string{os.TempDir()}, perfevent.Options{}); !errors.As(err, &nr) || nr.ExitStatus() != 126 {
		t.Errorf("starting a directory: %v", err)
	}
	for _, o := range []perfevent.Options{{StackSize: 65536}, {StackSize: 12}, {Freq: -1}, {BufferPages: 3}} {
		if _, err := perfevent.AttachPID(os.Getpid(), o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
	if !strings.Contains(perfevent.PermissionHint(), "kernel.perf_event_paranoid <= 1 (it is ") {
		t.Errorf("hint does not name the sysctl: %s", perfevent.PermissionHint())
	}
}

// startCommand records argv with opt from its exec; done receives its
// exit. The recorder is closed when the test ends.
func startCommand(t *testing.T, argv []string, opt perfevent.Options) (*perfevent.Recorder, *perfevent.Command, <-chan error) {
	t.Helper()
	rec, cmd, err := perfevent.StartCommand(argv, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Close() })
	if err := cmd.Release(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return rec, cmd, done
}

// drain reads rec through the recording pump until the program exits.
func drain(t *testing.T, rec *perfevent.Recorder, done <-chan error, fn func(*perfdata.Record)) error {
	t.Helper()
	var exitErr error
	p := &session.Pump{Source: rec, Add: fn, Interval: 50 * time.Millisecond, Check: perftest.UntilExit(t, done, &exitErr)}
	p.Run()
	if p.Err() != nil {
		t.Fatal(p.Err())
	}
	return exitErr
}

// TestSwitchesOfBlockingThreads records the sched_switch tracepoint of a
// command whose 4 busy threads share the CPUs: they are preempted again and
// again, and those switches (prev_state running) must not reach the ring
// buffer, each with its stack copy; the blocking sleep and wait of the
// shell that started them must.
func TestSwitchesOfBlockingThreads(t *testing.T) {
	perftest.RequirePerfEvent(t)
	format, err := os.ReadFile("/sys/kernel/tracing/events/sched/sched_switch/format")
	if err != nil {
		t.Skipf("no tracefs to read the sched_switch format from (needs root): %v", err)
	}
	m := regexp.MustCompile(`field:long prev_state;\s*offset:(\d+);\s*size:8;`).FindSubmatch(format)
	if m == nil {
		t.Fatalf("no 8-byte prev_state in the sched_switch format:\n%s", format)
	}
	off, _ := strconv.Atoi(string(m[1]))
	exe := perftest.BuildCPU(t, "-fomit-frame-pointer")
	// The shell's sleep and wait block for sure; the 4 threads of its
	// child (inheriting the events) burn CPU.
	rec, _, done := startCommand(t, []string{"/bin/sh", "-c", exe + " 1 3 & sleep 0.3; wait"}, perfevent.Options{OffCPU: true})
	states := map[uint64]int{}
	drain(t, rec, done, func(r *perfdata.Record) {
		if r.Type == perfdata.RecordSample && len(r.Sample.RawData) >= off+8 {
			states[binary.LittleEndian.Uint64(r.Sample.RawData[off:])]++
		}
	})
	t.Logf("switches by prev_state: %v", states)
	blocking := 0
	for st, n := range states {
		if st&0xff == 0 {
			t.Errorf("%d switches of running threads (prev_state %#x) recorded", n, st)
		} else {
			blocking += n
		}
	}
	if blocking == 0 {
		t.Errorf("no blocking switch recorded: the shell sleeps and waits")
	}
}
