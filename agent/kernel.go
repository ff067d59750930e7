package agent

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/rewindstack/rewind/bpfunwind"
	"github.com/rewindstack/rewind/internal/tracefs"
	"github.com/rewindstack/rewind/perfevent"
	"github.com/rewindstack/rewind/session"
)

// Where Config.UnwindIn has user stacks unwound.
const (
	UnwindAuto   = "auto"   // kernel when the BPF programs load, else user
	UnwindKernel = "kernel" // a BPF program walks the stacks and counts them in the kernel
	UnwindUser   = "user"   // stack copies unwound by the agent
)

// loadKernel loads the in-kernel unwinder for UnwindIn kernel or auto: nil
// (with one warning line for auto) when the agent unwinds stack copies.
func (a *Agent) loadKernel() (*bpfunwind.Unwinder, error) {
	mode := a.cfg.UnwindIn
	if mode == UnwindUser {
		return nil, nil
	}
	if mode != UnwindKernel && mode != UnwindAuto {
		return nil, fmt.Errorf("unwind-in %q: want kernel, user or auto", mode)
	}
	var err error
	var u *bpfunwind.Unwinder
	if a.cfg.Scope.Cgroup != "" {
		err = errors.New("the in-kernel unwinder does not select by cgroup")
	} else {
		opt := bpfunwind.Options{PIDs: a.cfg.Scope.PIDs, Objects: a.cpuCol.Objects, Warn: a.cfg.Warn,
			LoadInBackground: true, SkipSelf: true, PollNotices: 10 * time.Millisecond}
		if re := a.cfg.Comm; re != nil {
			// Processes out of --comm's scope are not described: on a
			// busy host, loading their files' rows would delay those of
			// the processes profiled.
			opt.Skip = func(pid int) bool { return !anyCommMatches(pid, re) }
		}
		// (That tracefs, which LoadKernel mounts, cannot be mounted is
		// said in the first period's line.)
		u, err = session.LoadKernel(opt)
	}
	if err == nil {
		return u, nil
	}
	msg := err.Error()
	if mode == UnwindKernel {
		return nil, fmt.Errorf("--unwind-in kernel: %s", msg)
	}
	a.cfg.Warn("unwinding in user space (--unwind-in auto): " + msg)
	return nil, nil
}

// runKernel is Run with stacks unwound and counted in the kernel: every
// period the counts are read once (the program switches to the other
// count map) and the finished stacks go to the same builders as stack
// copies.
func (a *Agent) runKernel(ctx context.Context, u *bpfunwind.Unwinder) error {
	defer u.Close()
	// The processes already running are described up front, their
	// files' rows loaded once in the background (from the table cache
	// when warm); new ones as the program meets them. This process is
	// described without rows, so that walks of its own threads, whose
	// samples are dropped, end at once.
	// The processes given by PID are walked in full from the first
	// sample: their files are loaded before the programs attach. A whole
	// host's load in the background meanwhile; until it is done, stacks
	// reaching a file not loaded yet end file-not-loaded (period line).
	if len(a.cfg.Scope.PIDs) == 0 {
		for _, pid := range allPIDs() {
			u.DescribeLater(pid)
		}
	} else {
		u.WaitLoaded(time.Minute)
	}
	if err := u.OnCPU(a.cfg.Freq); err != nil {
		return err
	}
	if a.cfg.OffCPU {
		a.offCol = a.newCollector()
		if err := u.OffCPU(0); err != nil {
			return fmt.Errorf("off-CPU profile: %w", err)
		}
	}
	a.startQueues()
	if a.cfg.DropPrivileges {
		// The maps are read through the descriptors already open.
		if err := DropPrivileges(KeptCapabilities); err != nil {
			a.cfg.Warn(err.Error())
		}
	}
	a.logReady("unwinding in the kernel")
	if a.cfg.Ready != nil {
		a.cfg.Ready()
	}
	built := a.startExports()
	start := time.Now()
	tick := time.NewTicker(a.cfg.Period)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
		}
		now := time.Now()
		a.flushKernel(u, start, now)
		start = now
	}
	close(a.jobs)
	<-built
	a.drainQueues(drainLimit)
	bpf := ""
	if d, n := u.ProgramTime(); n > 0 {
		bpf = fmt.Sprintf("; the BPF unwinder ran %d times, %.1f ms of CPU in all (%.1f µs each)", n, float64(d)/1e6, float64(d)/1e3/float64(n))
	}
	a.logStop(bpf)
	return nil
}

// flushKernel reads the period's counts and builds and exports its
// profiles.
func (a *Agent) flushKernel(u *bpfunwind.Unwinder, start, end time.Time) {
	a.periods++
	stacks, err := u.Read()
	if err != nil {
		a.cfg.Warn(fmt.Sprintf("reading the kernel's counts: %v", err))
	}
	var cpu, off []bpfunwind.Stack
	var st kernelStats
	for _, s := range stacks {
		if !a.keep(s.PID, s.TID) {
			continue
		}
		st.add(s)
		if s.OffCPU {
			off = append(off, s)
		} else {
			cpu = append(cpu, s)
		}
	}
	t := perfevent.Now()
	u.Feed(a.cpuCol, cpu, t, uint64(1e9/a.cfg.Freq))
	a.jobs <- buildJob{TypeCPU, start, end, a.cpuCol.Take(math.MaxUint64), a.cpuCol, true}
	a.cpuCol.Prune(alive)
	if a.offCol != nil {
		u.Feed(a.offCol, off, t, 0)
		a.jobs <- buildJob{TypeOffCPU, start, end, a.offCol.Take(math.MaxUint64), a.offCol, true}
		a.offCol.Prune(alive)
	}
	if a.periods == 2 {
		// The start's transient memory (the host's files compiled
		// into rows) is returned to the system at once: left to the
		// runtime's background scavenger, it took a fifth of an idle
		// agent's CPU for minutes. (After the read: the collection
		// would move the period's end.)
		debug.FreeOSMemory()
	}
	if a.cfg.Log != nil {
		sent, dropped, failed, depth := a.queueStats()
		fmt.Fprintf(a.cfg.Log, "rewind agent: period %d (%s): unwound in the kernel: %d samples (0 lost)%s%s%s; profiles sent %d, dropped %d, failed sends %d, queue depth %d\n",
			a.periods, end.Sub(start).Round(time.Millisecond), st.samples, st.offLine(a.offCol != nil), st.unfinished(u),
			a.bpfLine(u)+a.workLine(u), sent, dropped, failed, depth)
	}
}

// bpfLine says how much CPU the BPF programs took since the last period
// line: time the kernel charges to the tasks they walked, not to the
// agent (empty when the kernel keeps no statistics).
func (a *Agent) bpfLine(u *bpfunwind.Unwinder) string {
	d, n := u.ProgramTime()
	if n == 0 {
		return ""
	}
	dd, dn := d-a.bpf.d, n-a.bpf.n
	a.bpf.d, a.bpf.n = d, n
	each := 0.0
	if dn > 0 {
		each = float64(dd) / 1e3 / float64(dn)
	}
	return fmt.Sprintf("; BPF programs %.1f ms of CPU in the sampled tasks (%d runs, %.1f µs each)", float64(dd)/1e6, dn, each)
}

// workLine says what the agent did for the program since the last period
// line: processes described (and asked for again unchanged), exits, files
// whose rows were loaded, the time these took, the rows map's use and the
// files evicted from it.
func (a *Agent) workLine(u *bpfunwind.Unwinder) string {
	w := u.Work()
	l := a.work
	a.work = w
	// Rows used of the map's and the files evicted for others: a host
	// mapping more than the map holds evicts files every period. The
	// file indexes taken say how close the files map is to full, past
	// which the indexes of files unused for a minute are reused.
	r := u.Rows()
	return fmt.Sprintf("; described %d processes (%.0f ms; %d more asked for unchanged), %d exits, loaded %d files' rows (%.0f ms); rows %d of %d used (largest free run %d), %d files evicted; %d of %d file indexes (%d reused); %d of %d rules",
		w.Described-l.Described, float64(w.Describe-l.Describe)/1e6, w.Unchanged-l.Unchanged, w.Exits-l.Exits, w.Files-l.Files, float64(w.Load-l.Load)/1e6,
		r.Used, r.Total, r.Largest, w.Evicted-l.Evicted, r.Files, bpfunwind.MaxFiles, r.Reused, r.Rules, bpfunwind.MaxRules)
}

// kernelStats counts a period's kernel walks.
type kernelStats struct {
	samples, blocked uint64
	ends             map[bpfunwind.End]uint64
}

func (k *kernelStats) add(s bpfunwind.Stack) {
	if s.OffCPU {
		k.blocked += s.Events
	} else {
		k.samples += s.Events
	}
	if len(s.User) > 0 && !s.End.Complete() {
		if k.ends == nil {
			k.ends = map[bpfunwind.End]uint64{}
		}
		k.ends[s.End] += s.Events
	}
}

func (k *kernelStats) offLine(on bool) string {
	if !on {
		return ""
	}
	return fmt.Sprintf(", %d blocked intervals (0 lost)", k.blocked)
}

// unfinished says, per reason, how many walks did not reach a root, and
// what did not fit in the kernel's maps.
func (k *kernelStats) unfinished(u *bpfunwind.Unwinder) string {
	var parts []string
	for e, n := range k.ends {
		parts = append(parts, fmt.Sprintf("%s %d", e, n))
	}
	sort.Strings(parts)
	s := ""
	if len(parts) > 0 {
		s = "; unfinished walks: " + strings.Join(parts, ", ")
	}
	for note, n := range tracefs.FoldNotes(u.Notes()) {
		s += fmt.Sprintf("; %s (%d)", note, n)
	}
	if e := u.Errors(); e.CountsFull+e.StacksFull+e.OffCPUFull+e.NoticesLost+e.KStacksFull > 0 {
		s += fmt.Sprintf("; maps full since start: %d counts, %d stacks, %d off-CPU starts, %d notices, %d kernel stacks", e.CountsFull, e.StacksFull, e.OffCPUFull, e.NoticesLost, e.KStacksFull)
	}
	return s
}
