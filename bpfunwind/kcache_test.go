package bpfunwind

import (
	"strings"
	"testing"
	"time"

	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
)

// TestKernelStackCacheTellsPathsApart counts a thread that blocks ten
// times in nanosleep, then ten times in poll, and so on
// (testdata/twokpaths.c). The kernel-stack cache reuses a stack only
// when the thread's kernel stack holds the same return addresses in the
// same places: every interval under sleeper must have nanosleep's kernel
// frames and none of poll's, and the other way round, while kernel
// stacks do come from the cache.
func TestKernelStackCacheTellsPathsApart(t *testing.T) {
	pid, _ := startC(t, "twokpaths")
	u := loadOffCPU(t, pid)
	ksyms, err := symbolize.LoadKallsyms()
	if err != nil {
		t.Skipf("no kernel symbols: %v", err)
	}
	kernel := func(s Stack) string {
		var fns []string
		for _, pc := range s.Kernel {
			name, _, _ := ksyms.Lookup(pc)
			fns = append(fns, name)
		}
		return strings.Join(fns, ";")
	}
	space := target.NewAddressSpace(u.Maps(pid), &target.Objects{})
	sym := &symbolize.Symbolizer{}
	var sleeps, polls uint64
	reused := u.KStacksReused()
	deadline := time.Now().Add(time.Minute)
	for sleeps+polls < 600 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		stacks, err := u.Read()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range stacks {
			if s.PID != pid || !s.OffCPU || len(s.Kernel) == 0 {
				continue
			}
			user, k := strings.Join(names(sym, space, s), ";"), kernel(s)
			sleep, poll := strings.Contains(k, "nanosleep"), strings.Contains(k, "do_sys_poll")
			switch {
			case strings.Contains(user, "sleeper;"):
				sleeps += s.Events
				if !sleep || poll {
					t.Errorf("%d intervals under sleeper have the kernel stack %s", s.Events, k)
				}
			case strings.Contains(user, "poller;"):
				polls += s.Events
				if sleep || !poll {
					t.Errorf("%d intervals under poller have the kernel stack %s", s.Events, k)
				}
			}
		}
	}
	reused = u.KStacksReused() - reused
	t.Logf("%d intervals in nanosleep, %d in poll; %d kernel stacks from the cache", sleeps, polls, reused)
	if sleeps < 200 || polls < 200 {
		t.Errorf("%d intervals in nanosleep and %d in poll, want 200 of each", sleeps, polls)
	}
	// The cache is per CPU: a thread that moves between CPUs (on a
	// loaded machine, at every block) misses it more.
	if reused < 20 {
		t.Errorf("%d of %d kernel stacks from the cache, want 20 at least", reused, sleeps+polls)
	}
}
