package bpfunwind

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestKernelStacksPruned counts a program blocking 500 times a second
// over several periods: once a period is read, its kernel-stack map holds
// no more than the stacks of the intervals still open (and some were
// deleted over the periods), while the
// blocked stacks of every period, those of intervals that began in the
// period before included, keep their kernel frames.
func TestKernelStacksPruned(t *testing.T) {
	pid, lines := startC(t, "block", "-fomit-frame-pointer")
	u := loadOffCPU(t, pid)
	var total, withKernel uint64
	pruned := 0
	for period := 0; period < 6; period++ {
		// A period: at least 100 sleeps (the program prints a line
		// every 100; those printed before the period, while the
		// unwinder loaded on a loaded machine, wait in the pipe).
		var ts unix.Timespec
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		for fresh := 0; fresh < 2; {
			if !lines.Scan() {
				t.Fatal("block ended")
			}
			var asked, at int64
			if fmt.Sscan(lines.Text(), &asked, &at); at >= ts.Nano() {
				fresh++
			}
		}
		stacks, err := u.Read()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range stacks {
			if s.PID == pid && s.OffCPU {
				total += s.Events
				if len(s.Kernel) > 0 {
					withKernel += s.Events
				}
			}
		}
		read := u.kstackMap(u.active == 0)
		left := 0
		var k uint32
		it := read.Iterate()
		var raw [127]uint64
		for it.Next(&k, &raw) {
			left++
		}
		kept, deleted := u.lastPrune[0], u.lastPrune[1]
		pruned += deleted
		if left > kept {
			t.Errorf("period %d: %d kernel stacks left in the map read, %d kept for open intervals", period, left, kept)
		}
	}
	if pruned == 0 {
		t.Errorf("no kernel stack pruned in 6 periods")
	}
	t.Logf("%d of %d blocked intervals have kernel frames", withKernel, total)
	if total < 100 || withKernel*100 < total*99 {
		t.Errorf("%d of %d blocked intervals have kernel frames, want >= 99%% of >= 100", withKernel, total)
	}
}

// TestKernelStacksFull samples dd copying zeros (most of its time in the
// kernel, in several call paths) with room for one kernel stack: the
// kernel stacks that find no room are counted (the period line's "kernel
// stacks"), and their samples are still counted, without kernel frames.
func TestKernelStacksFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("BPF needs root (or CAP_BPF and CAP_PERFMON)")
	}
	dd, err := exec.LookPath("dd")
	if err != nil {
		t.Skip("no dd")
	}
	cmd := exec.Command(dd, "if=/dev/zero", "of=/dev/null", "bs=256k")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	u, err := Load(Options{PIDs: []int{cmd.Process.Pid}, Sizes: Sizes{Rows: 1 << 16, Stacks: 256, Counts: 1024, KStacks: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if err := u.OnCPU(999); err != nil {
		t.Fatal(err)
	}
	var samples, without uint64
	deadline := time.Now().Add(time.Minute)
	for (u.Errors().KStacksFull == 0 || without == 0) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		stacks, err := u.Read()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range stacks {
			if s.PID == cmd.Process.Pid {
				samples += s.Value
				if len(s.Kernel) == 0 {
					without += s.Value
				}
			}
		}
	}
	t.Logf("%d samples, %d without kernel frames; %d kernel stacks refused", samples, without, u.Errors().KStacksFull)
	if u.Errors().KStacksFull == 0 || without == 0 {
		t.Errorf("no kernel stack refused by a one-stack map in a minute of dd (%d samples)", samples)
	}
}

// TestPreallocated loads the programs as on a kernel older than 6.1
// (every hash map preallocated, the large ones smaller) and walks a C
// program's stacks with them.
func TestPreallocated(t *testing.T) {
	forcePrealloc = true
	defer func() { forcePrealloc = false }()
	pid, _ := startC(t, "spin", "-fomit-frame-pointer")
	u := load(t, pid)
	notes := u.Notes()
	t.Log(notes)
	found := false
	for n := range notes {
		found = found || strings.HasPrefix(n, "Linux before 6.1: BPF hash maps preallocated")
	}
	if !found {
		t.Errorf("no note of the preallocated maps: %v", notes)
	}
	stacks := collect(t, u, pid, 200)
	var total, complete uint64
	for _, s := range stacks {
		total += s.Value
		if s.End.Complete() {
			complete += s.Value
		}
	}
	t.Logf("%d of %d samples complete", complete, total)
	if complete*100 < total*99 {
		t.Errorf("%d of %d samples complete", complete, total)
	}
}

// TestDescribeKeepsGeneration: describing a process whose mappings did
// not change keeps its generation (its stacks stay one), and a new
// mapping makes a new one.
func TestDescribeKeepsGeneration(t *testing.T) {
	pid, _ := startC(t, "spin", "-fomit-frame-pointer")
	u := load(t, pid)
	gen := func() int { u.mu.Lock(); defer u.mu.Unlock(); return u.gen[pid] }
	g := gen()
	for i := 0; i < 3; i++ {
		if err := u.Describe(pid); err != nil {
			t.Fatal(err)
		}
	}
	if gen() != g || g == 0 {
		t.Errorf("generation %d after describing an unchanged process again, was %d", gen(), g)
	}
	u.mu.Lock()
	u.history[pid][g] = u.history[pid][g][1:] // as if a mapping were new
	delete(u.described, pid)                  // ... and its maps file had changed
	u.mu.Unlock()
	u.Describe(pid)
	if gen() != g+1 {
		t.Errorf("generation %d after a changed description, want %d", gen(), g+1)
	}
}
