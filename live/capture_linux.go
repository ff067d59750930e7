package live

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rewindstack/rewind/internal/procmaps"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/target"
)

// testHookStopped, when set (by tests only), runs on the tracer thread
// while every selected thread is stopped, after the stacks were copied and
// before they are detached.
var testHookStopped func(pid int)

// testHookSeized, when set (by tests only), runs on the tracer thread
// after the first threads were seized and before they are interrupted.
var testHookSeized func(pid int)

// testHookDone, when set (by tests only), receives every finished
// session, for its phase times.
var testHookDone func(s *session)

// testHookBusy, when set (by tests only), runs when a capture found its
// threads held by another rewind, before it waits for them.
var testHookBusy func(pid int)

// errThreadGone is the Err of a thread that exited during the capture.
var errThreadGone = errors.New("thread has exited")

// errStuck is wrapped by the Err of a thread that an earlier capture
// interrupted and that has not stopped since (StopTimeout): the tracer
// still holds it, to detach it once it stops.
var errStuck = errors.New("has not stopped since an earlier capture interrupted it (uninterruptible sleep?)")

// iovMax is IOV_MAX, the most iovecs one process_vm_readv accepts.
const iovMax = 1024

// probeAfter is how long the collection of stops goes without news before
// it asks each pending thread directly whether it is stopped (its stop may
// have been reported to another thread of this process; see doc.go).
const probeAfter = 200 * time.Microsecond

// Capture stops the threads of process pid (all, or opt.Threads), copies
// their registers and stacks and the process's mappings, and lets them
// run again. See the package documentation for the sequence.
//
// Threads that exit during the capture are reported with Err; that is not
// an error, unless no thread at all was captured (an error wrapping
// ErrExited when the process exited). If the whole process exits while it
// is being captured, or its maps cannot be read, Capture returns what it
// copied together with an error (wrapping ErrExited in the first case). A
// thread that another tracer holds, or that may not be traced, fails the
// capture: when the tracer is another rewind, Capture waits for it first
// (Options.BusyWait). Do not capture a child of the calling process while
// another goroutine waits for it: see the package documentation.
func Capture(pid int, opt Options) (*Snapshot, error) {
	var snap *Snapshot
	err := retryBusy(opt.BusyWait, func() (err error) {
		snap, err = capture(pid, opt)
		return err
	})
	return snap, err
}

// capture is one attempt of Capture.
func capture(pid int, opt Options) (*Snapshot, error) {
	info, err := inspect(pid)
	if err != nil {
		return nil, err
	}
	s := newSession(info, opt)
	s.prepare(true)
	tr := getTracer()
	s.tracer = tr
	if opt.MaxPause >= 0 {
		s.duringBound = opt.MaxPause
		if s.duringBound == 0 {
			s.duringBound = DefaultMaxPause
		}
		if opt.During == nil || opt.StaggerDuring {
			s.maxPause = s.duringBound
		}
	}
	// No garbage collection cycle may run while the target is stopped:
	// During may allocate (thousands of fibers' copies), and a cycle in
	// progress takes a CPU the stopping threads need and stops the
	// tracer for its phase changes (on 2 CPUs, a 101-thread capture
	// paused 0.7-1.3 ms longer with the collector on). Turning it off
	// first waits for a cycle in progress, before the pause.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	if opt.During != nil && !opt.DuringOnTracer {
		getHelper() // its thread started before the pause
	}
	var ferr error
	early := false
	if opt.MapsBeforePause {
		s.readMaps()
		early = len(s.mapsRaw) > 0 // else the pause's fallbacks apply
	}
	tr.run(func() {
		if opt.BeforeStop != nil {
			opt.BeforeStop(NewReader(s.pid))
		}
		defer quietStops()()
		defer s.thaw()
		if ferr = s.freeze(); ferr != nil {
			return
		}
		s.mark(markFrozen)
		during := s.startDuring()
		defer during() // before thaw, also when a copy panics
		if !early && !s.mapsRead || early && !s.stacksMapped() {
			s.readMaps()
		}
		s.mark(markMaps)
		s.copyStacks()
		s.copySwitched()
		s.mark(markStacks)
		during()
		if s.during == nil {
			s.checkAsleep(nil) // else as During returned
		}
		s.restopWoken()
		s.mark(markCopied)
		if testHookStopped != nil {
			testHookStopped(s.pid)
		}
	})
	if ferr != nil {
		return nil, ferr
	}
	snap := s.snapshot()
	for i := range snap.Threads {
		snap.Threads[i].Name = threadName(s.pid, snap.Threads[i].TID)
	}
	if testHookDone != nil {
		testHookDone(s)
	}
	return snap, s.exitError()
}

// WithStopped stops the threads of process pid (all, or opt.Threads),
// reads their registers and the process's mappings, and calls fn while
// they stay stopped, so that fn can unwind reading memory on demand
// (s.Mem reads the live process; no stacks are copied and opt.MaxStack is
// ignored). The threads are resumed when fn returns, on every path: an
// error, a panic in fn (which is then raised again), or runtime.Goexit.
// fn must not keep s.Mem past its return and expect frozen contents.
// s.Pause is set after the threads resumed, once fn returned. An error of
// fn is returned as is; otherwise the process exiting meanwhile gives an
// error wrapping ErrExited. fn runs on a goroutine of its own; when it has
// not returned after opt.MaxStopped the threads are resumed and
// WithStopped returns ErrStoppedTooLong without waiting for it (or an
// error wrapping ErrExited if the process has exited meanwhile). Threads
// held by another tracer are handled as by Capture; fn is not called
// then, nor when no thread could be stopped.
func WithStopped(pid int, opt Options, fn func(s *Snapshot) error) error {
	tr := getTracer()
	var s *session
	err := retryBusy(opt.BusyWait, func() error {
		info, err := inspect(pid)
		if err != nil {
			return err
		}
		s = newSession(info, opt)
		s.leaveAsleep = nil // fn may read anything: every thread stops
		s.prepare(false)
		s.tracer = tr
		tr.run(func() {
			defer quietStops()()
			if err = s.freeze(); err != nil {
				s.thaw()
				return
			}
			s.mark(markFrozen)
			s.readMaps()
		})
		return err
	})
	if err != nil {
		return err
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			tr.run(s.thaw)
		}
	}
	defer thaw()
	snap := s.snapshot()
	for i := range snap.Threads {
		snap.Threads[i].Name = threadName(s.pid, snap.Threads[i].TID)
	}
	// fn runs on its own goroutine so that nothing it blocks on can keep
	// the threads stopped beyond MaxStopped.
	// A panic in fn is raised again here, after the threads are resumed.
	type result struct {
		err      error
		panicked bool
		p        any
	}
	done := make(chan result, 1)
	go func() {
		r := result{panicked: true}
		defer func() {
			if r.panicked {
				r.p = recover()
			}
			done <- r
		}()
		r.err = fn(snap)
		r.panicked = false
	}()
	var expired <-chan time.Time
	limit := opt.MaxStopped
	if limit == 0 {
		limit = DefaultMaxStopped
	}
	if limit > 0 {
		tm := time.NewTimer(limit)
		defer tm.Stop()
		expired = tm.C
	}
	select {
	case r := <-done:
		if r.panicked {
			thaw()
			if r.p == nil { // fn called runtime.Goexit (panic(nil) recovers a *runtime.PanicNilError)
				runtime.Goexit()
			}
			panic(r.p)
		}
		err = r.err
	case <-expired:
		thaw()
		if processGone(s.pid) {
			// Unwinding a process that died under it is not slow
			// unwinding.
			return kindErrorf(ErrExited, "live: process %d exited while its stopped threads were being unwound", s.pid)
		}
		return fmt.Errorf("%w (limit %v)", ErrStoppedTooLong, limit)
	}
	thaw()
	snap.Pause = s.end.Sub(s.start)
	if err != nil {
		return err
	}
	return s.exitError()
}

// session is the state of one capture. Everything but snapshot and
// exitError runs on the tracer thread.
type session struct {
	tracer   *tracer
	pid      int
	comm     string
	exe      string
	want     map[int]bool // selected TIDs; nil selects all
	ourChild bool         // the process is a child of this one

	threads  []*tstate // in the order they were found
	byTID    map[int]*tstate
	mapsRaw  []byte           // the maps text, read during the pause
	ranges   []procmaps.Range // the address ranges in it
	during   func(*Reader)    // Options.During
	mapsHint int              // Options.MapsHint
	mapsErr  error

	start, end time.Time // first PTRACE_INTERRUPT, last PTRACE_DETACH
	started    bool
	rounds     int                 // rounds of seize, interrupt, collect
	marks      [numMarks]time.Time // phase ends, for tests and benchmarks

	maxStack   int    // bytes per thread; negative: none
	scratch    []byte // stack copies go here, faulted in before the pause
	scratchUse int    // bytes of scratch taken by earlier copyStacks calls
	mapsRead   bool   // readMaps ran

	// maxPause is Options.MaxPause for a Capture without During or with
	// StaggerDuring (zero otherwise): once threads have waited that long
	// for slower ones to stop, every stopped thread is copied and resumed
	// at once, and each later one as soon as it stops (staggered).
	maxPause time.Duration
	blocked  func(pid int) ([]BlockedThread, error) // Options.BlockedThreads
	// duringBound is Options.MaxPause for During's reads (Reader.Deadline),
	// with or without StaggerDuring; zero: unbounded.
	duringBound time.Duration
	staggered   bool
	// releasedEarly: the threads stopped after being left asleep were
	// resumed as soon as copied (restopWoken, without During).
	releasedEarly bool
	duringRan     bool   // Options.During was called
	mapsBuf       []byte // /proc/PID/maps is read into it, ditto
	seizeErr      error  // why a thread could not be seized, other than its exit
	regBuf        [userRegsWords + 8]uint64

	// duringStart and duringEnd are when During began and returned, and
	// duringOnHelper says it ran on the helper thread (see startDuring).
	duringStart, duringEnd time.Time
	duringOnHelper         bool

	stackEnd       func(sp uint64) (uint64, bool) // Options.StackEnd
	duringOnTracer bool                           // Options.DuringOnTracer
	leaveAsleep    func(AsleepThread) bool        // Options.LeaveAsleep
	asleepN        int                            // threads left asleep now
	// wokeN counts the threads left asleep that ran before During ended,
	// and checked is how long checking them took after each During.
	wokeN   int
	checked time.Duration
}

// tstate is one thread's progress through a capture.
type tstate struct {
	tid      int
	attached bool // seized, not yet detached or found gone
	stopped  bool // known to be in a ptrace stop
	sig      int  // signal to deliver when detaching
	probed   bool // found stopped by a register read, not by wait4
	stopAt   time.Time
	regs     regs.Regs
	tp       uint64
	stack    target.Region
	switched []target.Region // other stacks its frame pointers lead to (copySwitched)
	err      error
	released bool      // copied and resumed before the others (staggered)
	resumeAt time.Time // when it was detached
	copied   bool      // copyStacks took its stack
	followed bool      // copySwitched followed its frame pointers
	// asleep: left asleep in the kernel, not seized (Options.LeaveAsleep),
	// with pcount its count of times scheduled when it was found asleep;
	// woke: that count changed by the end of During.
	asleep, woke bool
	pcount       uint64
	// full: left asleep with its whole register set and TP
	// (Options.BlockedThreads), its stack copied as a stopped one's.
	full bool
}

func newSession(info procInfo, opt Options) *session {
	s := &session{pid: info.pid, comm: info.comm, exe: info.exe, ourChild: info.ppid == os.Getpid(),
		byTID: map[int]*tstate{}, maxStack: opt.MaxStack, during: opt.During, mapsHint: opt.MapsHint,
		stackEnd: opt.StackEnd, duringOnTracer: opt.DuringOnTracer, leaveAsleep: opt.LeaveAsleep, blocked: opt.BlockedThreads}
	if len(opt.Threads) > 0 {
		s.want = map[int]bool{}
		for _, tid := range opt.Threads {
			s.want[tid] = true
		}
	}
	if s.maxStack == 0 {
		s.maxStack = DefaultMaxStack
	}
	return s
}

// Phases of a capture, marked in session.marks.
const (
	markInterrupted = iota // every thread of the first round interrupted
	markCollected          // their stops collected
	markFrozen             // threads created meanwhile stopped too
	markMaps               // maps read
	markStacks             // the tracer's stack copies done
	markCopied             // stacks copied and During done
	numMarks
)

func (s *session) mark(i int) { s.marks[i] = time.Now() }

// scratchPerThread is how much stack buffer prepare faults in per thread
// before the pause: enough for an idle thread's stack, its struct pthread
// and TLS. Copies that need more allocate the rest during the pause.
const scratchPerThread = 16 << 10

// prepare allocates, before the pause, the buffers that the pause fills,
// and touches every page of them: a page fault costs microseconds (more
// in a virtual machine), and process_vm_readv into fresh memory takes one
// per page.
func (s *session) prepare(capture bool) {
	s.mapsBuf = touch(make([]byte, max(64<<10, s.mapsHint+s.mapsHint/4)))
	s.ranges = make([]procmaps.Range, 0, max(512, s.mapsHint/64))
	if !capture || s.maxStack < 0 {
		return
	}
	n := 1
	if s.want != nil {
		n = len(s.want)
	} else if tids, err := listTasks(s.pid); err == nil {
		n = len(tids)
	}
	per := min(s.maxStack, scratchPerThread)
	s.scratch = touch(make([]byte, min(n*per, 16<<20)))
}

// touch writes to every page of b so that it is backed by memory.
func touch(b []byte) []byte {
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	return b
}

// freeze seizes and stops every selected thread, threads created
// meanwhile included, and reads their registers. An error means nothing
// could be captured: a thread could not be seized for a reason other
// than its exit (s.seizeErr), or none could be stopped. thaw must run in
// any case.
func (s *session) freeze() error {
	tids, err := listTasks(s.pid)
	if err != nil {
		return kindErrorf(os.ErrNotExist, "live: no such process: %d", s.pid)
	}
	round := s.seize(s.leaveSleepers(tids))
	if s.seizeErr != nil {
		s.abandon(round)
		return s.seizeErr
	}
	if s.want != nil {
		listed := map[int]bool{}
		for _, tid := range tids {
			listed[tid] = true
		}
		for tid := range s.want {
			if !listed[tid] {
				th := &tstate{tid: tid, err: fmt.Errorf("thread %d is not a thread of process %d", tid, s.pid)}
				s.threads = append(s.threads, th)
				s.byTID[tid] = th
			}
		}
	}
	if len(round) == 0 && s.asleepN == 0 {
		return s.noThreadError()
	}
	if testHookSeized != nil {
		testHookSeized(s.pid)
	}
	if len(round) > 0 {
		s.interrupt(round)
		s.mark(markInterrupted)
		s.collect(round)
		s.mark(markCollected)
	}
	// Threads created while the others were stopping: once every listed
	// thread is stopped none can be created, so this ends. Threads
	// released early (staggered) run again and may create more: those
	// are not waited for.
	for !s.staggered {
		tids, err := listTasks(s.pid)
		if err != nil {
			break
		}
		round = s.seize(tids)
		if s.seizeErr != nil {
			s.abandon(round)
			return s.seizeErr
		}
		if len(round) == 0 {
			break
		}
		s.interrupt(round)
		s.collect(round)
	}
	for _, th := range s.threads {
		if (th.stopped || th.asleep) && th.err == nil {
			return nil
		}
	}
	return s.noneCaptured()
}

// noneCaptured explains why no thread stopped: they all exited (the
// process did, typically), or could not be stopped in time.
func (s *session) noneCaptured() error {
	if processGone(s.pid) {
		return kindErrorf(ErrExited, "live: process %d exited during the capture; no thread was captured", s.pid)
	}
	for _, th := range s.threads {
		if th.err != nil && th.err != errThreadGone {
			return fmt.Errorf("live: process %d: no thread could be captured: %w", s.pid, th.err)
		}
	}
	return kindErrorf(ErrExited, "live: process %d: every thread to capture exited during the capture", s.pid)
}

// seize PTRACE_SEIZEs the selected threads among tids not seen before and
// returns those attached. A thread that cannot be seized for a reason
// other than its exit sets s.seizeErr and ends the round: the capture
// cannot be complete.
func (s *session) seize(tids []int) []*tstate {
	var round []*tstate
	for _, tid := range tids {
		if s.byTID[tid] != nil || (s.want != nil && !s.want[tid]) {
			continue
		}
		th := &tstate{tid: tid}
		s.threads = append(s.threads, th)
		s.byTID[tid] = th
		if err := s.seizeThread(tid); err != nil {
			th.err = err
			if err != errThreadGone && !errors.Is(err, errStuck) {
				s.seizeErr = err
				break
			}
			continue
		}
		th.attached = true
		round = append(round, th)
	}
	return round
}

// seizeTries is how many times seizeThread tries a thread that refuses
// with EPERM while it is alive and untraced.
const seizeTries = 4

// seizeThread PTRACE_SEIZEs tid, or says why it cannot: errThreadGone, a
// tracer holding it (a *busyError for another rewind), or a permission
// error.
func (s *session) seizeThread(tid int) error {
	untraced := 0
	for try := 1; ; try++ {
		err := s.seizeGuarded(tid)
		switch err {
		case nil:
			return nil
		case unix.ESRCH:
			return errThreadGone
		case unix.EPERM:
		default:
			return fmt.Errorf("PTRACE_SEIZE of thread %d: %w", tid, err)
		}
		// EPERM also answers a thread that has begun to exit, and one
		// that another tracer holds.
		if threadExiting(s.pid, tid) {
			return errThreadGone
		}
		if s.tracer.isOrphan(tid) && tracerOf(s.pid, tid) == unix.Gettid() {
			return fmt.Errorf("thread %d %w", tid, errStuck)
		}
		switch terr := tracedError(s.pid, tid); {
		case terr == errTracerLeft && try >= 16*seizeTries:
			return kindErrorf(ErrTraced, "live: thread %d of process %d is seized by one tracer after another", tid, s.pid)
		case terr == errTracerLeft:
			continue // seize again
		case terr != nil:
			return terr
		}
		// Alive and untraced now: either tracing it is not allowed, or
		// its tracer let go (or it began to exit) since the seize. Only
		// the first refuses every time.
		if untraced++; untraced == seizeTries {
			return permissionError(s.pid, s.comm, err)
		}
	}
}

// abandon stops the threads of round, seized but not interrupted, so
// that thaw can detach them: the capture cannot go on (a tracee can only
// be detached in a stop).
func (s *session) abandon(round []*tstate) {
	if len(round) == 0 {
		return
	}
	s.maxPause, s.during = 0, nil // copy nothing
	s.interrupt(round)
	s.collect(round)
}

// retryBusy runs attempt until it returns anything but a *busyError, or
// until wait (Options.BusyWait) has passed since the first: between
// attempts it waits until the other rewind lets go of the thread it
// holds.
func retryBusy(wait time.Duration, attempt func() error) error {
	if wait == 0 {
		wait = DefaultBusyWait
	}
	var deadline time.Time
	for {
		err := attempt()
		var be *busyError
		if !errors.As(err, &be) || wait < 0 {
			return err
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(wait)
		}
		if testHookBusy != nil {
			testHookBusy(be.tracer)
		}
		if !waitReleased(be, deadline) {
			be.waited = wait
			return be
		}
	}
}

// waitReleased polls until the tracer named by be no longer holds its
// thread, and reports whether that happened before deadline.
func waitReleased(be *busyError, deadline time.Time) bool {
	for {
		if taskGone(be.pid, be.tid) || tracerOf(be.pid, be.tid) != be.tracerTID {
			return true
		}
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
}

// noThreadError explains why the first round attached no thread at all.
func (s *session) noThreadError() error {
	var gone, other error
	for _, th := range s.threads {
		switch {
		case th.err == errThreadGone:
			gone = th.err
		case th.err != nil && other == nil:
			other = th.err
		}
	}
	switch {
	case other != nil && s.want == nil:
		return other
	case other != nil:
		return fmt.Errorf("live: process %d: no selected thread could be captured: %w", s.pid, other)
	case gone != nil:
		return kindErrorf(ErrExited, "live: process %d exited before it could be stopped", s.pid)
	}
	return fmt.Errorf("live: process %d has no thread to capture", s.pid)
}

func (s *session) interrupt(round []*tstate) {
	s.rounds++
	if !s.started {
		s.started = true
		s.start = time.Now()
	}
	s.tracer.raise() // threads stop from here on
	for _, th := range round {
		if err := ptraceInterrupt(th.tid); err != nil {
			// Only ESRCH is possible here: the thread died since SEIZE.
			// collect learns it from wait4.
			continue
		}
	}
}

// collect waits until every thread of round has stopped (and reads its
// registers), exited, or failed to stop within StopTimeout.
func (s *session) collect(round []*tstate) {
	pending := append([]*tstate(nil), round...)
	deadline := time.Now().Add(StopTimeout)
	last := time.Now()
	idle := 0
	for len(pending) > 0 {
		n := 0
		for _, th := range pending {
			if !s.poll(th) {
				pending[n] = th
				n++
			}
		}
		progressed := n < len(pending)
		pending = pending[:n]
		if s.maxPause > 0 && (s.staggered || time.Since(s.start) > s.maxPause) {
			// Threads slow to stop (waiting for a CPU on a busy machine)
			// keep the others stopped no longer: those stopped are copied
			// and resumed now, each late one as soon as it stops.
			s.staggered = true
			// Options.StaggerDuring: During reads with the
			// threads stopped so far, before they resume.
			s.runDuring()
			s.release()
		}
		if len(pending) == 0 {
			break
		}
		if progressed {
			idle = 0
			last = time.Now()
			continue
		}
		idle++
		now := time.Now()
		if now.Sub(last) > probeAfter {
			// A register read succeeds only on a tracee in a ptrace
			// stop, whoever consumed the report of that stop.
			n = 0
			for _, th := range pending {
				if s.readRegs(th) == nil {
					th.stopped = true
					th.stopAt = time.Now()
					th.probed = true
					th.sig, _ = stopSignal(th.tid)
					continue
				}
				pending[n] = th
				n++
			}
			pending = pending[:n]
			last = now
			if s.staggered {
				s.release()
			}
		}
		if now.After(deadline) {
			for _, th := range pending {
				th.err = fmt.Errorf("thread %d did not stop within %v (uninterruptible sleep?)", th.tid, StopTimeout)
			}
			break
		}
		if idle < 64 {
			schedYield()
		} else {
			ts := unix.Timespec{Nsec: 20_000}
			unix.Nanosleep(&ts, nil)
		}
	}
}

func schedYield() { unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// poll checks for a wait report of th and reports whether th is settled
// (stopped, with its registers read, or gone).
func (s *session) poll(th *tstate) bool {
	wait := wait4
	if th.tid == s.pid && s.ourChild {
		// Its exit status is its parent's: this process's own wait.
		wait = waitNoReap
	}
	wpid, ws, err := wait(th.tid)
	switch {
	case err != nil:
		// ECHILD: th is no tracee of this thread any more. It exited and
		// was reaped by another thread of this process (os/exec's
		// Cmd.Wait on a child, say).
		th.attached = false
		th.err = errThreadGone
		if err != unix.ECHILD {
			th.err = fmt.Errorf("wait4 of thread %d: %w", th.tid, err)
		}
		return true
	case wpid == 0:
		return false
	case ws.Stopped():
		th.stopped = true
		th.stopAt = time.Now()
		// Stops of a seized tracee that are not signal-delivery-stops
		// (the PTRACE_INTERRUPT trap, a group-stop) carry
		// PTRACE_EVENT_STOP in bits 16..23. A signal-delivery-stop holds
		// the signal back: it is delivered again on detach.
		if uint32(ws)>>16 != unix.PTRACE_EVENT_STOP {
			th.sig = int(ws.StopSignal())
		}
		if err := s.readRegs(th); err != nil && th.err == nil {
			th.err = err
		}
		return true
	case ws.Exited(), ws.Signaled():
		th.attached = false
		th.stopped = false
		th.err = errThreadGone
		return true
	}
	return false
}

// readRegs reads th's registers; it fails unless th is in a ptrace stop.
func (s *session) readRegs(th *tstate) error {
	n, err := getRegset(th.tid, s.regBuf[:])
	if err != nil {
		if err == unix.ESRCH {
			return errThreadGone
		}
		return fmt.Errorf("PTRACE_GETREGSET of thread %d: %w", th.tid, err)
	}
	th.regs, err = convertRegs(s.regBuf[:], n)
	th.tp = regs.ThreadPointer(hostArch, s.regBuf[:n/8])
	return err
}

// readMaps reads the maps text and the address ranges in it; the rest is
// parsed after the pause. With the main thread gone (it called
// pthread_exit), /proc/PID/maps is empty, and a live thread's copy is
// read instead.
func (s *session) readMaps() {
	s.mapsRead = true
	s.mapsRaw, s.mapsErr = s.readMapsText(fmt.Sprintf("/proc/%d/maps", s.pid))
	if len(s.mapsRaw) == 0 {
		for _, th := range s.threads {
			if th.stopped && th.tid != s.pid {
				if b, err := s.readMapsText(fmt.Sprintf("/proc/%d/task/%d/maps", s.pid, th.tid)); err == nil && len(b) > 0 {
					s.mapsRaw, s.mapsErr = b, nil
					break
				}
			}
		}
	}
	s.ranges = procmaps.ScanRanges(s.mapsRaw, s.ranges[:0])
}

// stacksMapped reports whether every stopped thread's SP lies in a range
// of the maps read: with the maps read before the pause, one that does
// not (a thread created since, on a new stack) has them read again.
func (s *session) stacksMapped() bool {
	for _, th := range s.threads {
		if !th.stopped || th.err != nil || th.released {
			continue
		}
		if sp, ok := th.regs.SP(); ok {
			if _, ok := procmaps.FindRange(s.ranges, sp); !ok {
				return false
			}
		}
	}
	return true
}

func (s *session) readMapsText(path string) ([]byte, error) {
	b, err := readProcFile(path, s.mapsBuf)
	if err != nil {
		return nil, err
	}
	if cap(b) > cap(s.mapsBuf) {
		s.mapsBuf = b
	}
	return b, nil
}

// copyStacks copies every stopped thread's stack, from SP-redZone to the
// end of SP's mapping or maxStack bytes, with as few process_vm_readv
// calls as there are multiples of IOV_MAX threads (one, in practice).
func (s *session) copyStacks() {
	maxStack := s.maxStack
	if maxStack < 0 {
		return
	}
	type job struct {
		th         *tstate
		start, end uint64
		dst        []byte
	}
	var jobs []job
	used, overflow := s.scratchUse, 0
	// process_vm_readv takes any thread's id; the main thread's is no
	// good once it has exited (a zombie has no memory).
	memTID := 0
	for _, th := range s.threads {
		if !(th.stopped || th.full) || th.err != nil || th.released || th.copied {
			continue
		}
		th.copied = true
		if memTID == 0 || th.tid == s.pid {
			memTID = th.tid
		}
		sp, ok := th.regs.SP()
		if !ok {
			continue
		}
		m, ok := procmaps.FindRange(s.ranges, sp)
		if !ok {
			continue
		}
		start := sp - redZone
		if sp < redZone || start < m.Start {
			start = m.Start
		}
		end := min(m.End, start+uint64(maxStack))
		if s.stackEnd != nil {
			if e, ok := s.stackEnd(sp); ok && e > start {
				end = min(end, e)
			}
		}
		j := job{th: th, start: start, end: end}
		if n := int(end - start); used+n <= len(s.scratch) {
			j.dst = s.scratch[used : used+n : used+n]
			used += n
		} else {
			overflow += n
		}
		jobs = append(jobs, j)
	}
	s.scratchUse = used
	if len(jobs) == 0 {
		return
	}
	// What does not fit the prepared buffer gets fresh memory now.
	extra := make([]byte, overflow)
	local := make([]unix.Iovec, len(jobs))
	remote := make([]unix.RemoteIovec, len(jobs))
	for i := range jobs {
		j := &jobs[i]
		n := int(j.end - j.start)
		if j.dst == nil {
			j.dst, extra = extra[:n:n], extra[n:]
		}
		if n > 0 {
			local[i].Base = &j.dst[0]
		}
		local[i].SetLen(n)
		remote[i] = unix.RemoteIovec{Base: uintptr(j.start), Len: n}
	}
	// A read stops at the first page it cannot read; the thread whose
	// iovec that was keeps what came before it, and the next call starts
	// with the next thread.
	for i := 0; i < len(jobs); {
		hi := min(len(jobs), i+iovMax)
		got, _ := processVMReadv(memTID, local[i:hi], remote[i:hi])
		k := i
		for ; k < hi; k++ {
			j := &jobs[k]
			take := min(got, len(j.dst))
			got -= take
			j.th.stack = target.Region{Addr: j.start, Data: j.dst[:take:take]}
			if take < len(j.dst) {
				break
			}
		}
		i = min(k+1, hi) // past the read that stopped short, or the whole chunk
	}
}

// thaw detaches every attached thread. It runs on every path out of a
// capture.
func (s *session) thaw() {
	for _, th := range s.threads {
		s.detach(th)
	}
	s.end = time.Now()
	s.tracer.lower()
	if !s.started {
		s.start = s.end
	}
}

// detach resumes th if it is attached.
func (s *session) detach(th *tstate) {
	if !th.attached {
		return
	}
	th.attached = false
	th.resumeAt = time.Now()
	if !th.stopped {
		// Only a stopped tracee can be detached: the tracer detaches
		// this one when it stops (or forgets it when it exits).
		s.orphan(th)
		return
	}
	if err := ptraceDetach(th.tid, th.sig); err != nil {
		// ESRCH on a stopped tracee: SIGKILL woke it and it is exiting.
		// A dead tracee stays a zombie until its tracer waits for it (and
		// a process's main thread cannot be reaped before its other
		// threads are), so the tracer reaps it, or detaches it if it was
		// not dying after all.
		s.orphan(th)
	}
}

// runDuring calls Options.During once, with the threads stopped now and
// not yet released.
func (s *session) runDuring() {
	if s.during == nil || s.duringRan {
		return
	}
	s.duringRan = true
	rd := s.duringReader()
	s.duringStart = time.Now()
	s.during(rd)
	s.duringEnd = time.Now()
	s.checkAsleep(rd.wantStopped)
}

// duringReader is the Reader During gets: the threads stopped now and not
// yet released.
func (s *session) duringReader() *Reader {
	rd := &Reader{tid: s.memTID()}
	if s.duringBound > 0 {
		// From now, not from the first stop: on a loaded machine the
		// stop alone can take longer than the bound, and a re-read of
		// a few kilobytes is no reason to give up what it checks.
		rd.deadline = time.Now().Add(s.duringBound)
	}
	for _, th := range s.threads {
		if th.stopped && !th.released {
			rd.threads = append(rd.threads, StoppedThread{TID: th.tid, TP: th.tp})
		} else if th.asleep {
			rd.threads = append(rd.threads, StoppedThread{TID: th.tid, TP: th.tp, Asleep: true})
		}
	}
	return rd
}

// startDuring starts Options.During, as runDuring would run it, on the
// helper thread, so that it reads on one CPU while the tracer reads the
// maps and copies the stacks on the other (During makes no ptrace
// request, and nothing either reads changes while every thread is
// stopped); it returns the function that waits for During to end (see
// helper.start: calls after the first do nothing), or that does nothing
// when During is not to run.
func (s *session) startDuring() (wait func()) {
	if s.during == nil || s.duringRan {
		return func() {}
	}
	if s.duringOnTracer {
		// After the tracer's own copies, on its thread (see
		// Options.DuringOnTracer).
		return func() { s.runDuring() }
	}
	s.duringRan = true
	rd, during := s.duringReader(), s.during
	tracerTID := unix.Gettid()
	return getHelper().start(func() {
		// Times kept by the thread that runs During: the helper, or the
		// tracer when it took the job back.
		s.duringStart = time.Now()
		s.duringOnHelper = unix.Gettid() != tracerTID
		during(rd)
		s.duringEnd = time.Now()
		s.checkAsleep(rd.wantStopped)
	})
}

// release copies the stacks of the threads stopped and not yet released
// (the maps first, if they were not read yet) and resumes them: a
// staggered capture's way to keep every thread's pause near maxPause.
func (s *session) release() {
	var ready bool
	for _, th := range s.threads {
		ready = ready || th.attached && th.stopped && !th.released
	}
	if !ready {
		return
	}
	if !s.mapsRead {
		s.readMaps()
	}
	s.copyStacks()
	s.copySwitched()
	for _, th := range s.threads {
		if th.attached && th.stopped && !th.released {
			th.released = true
			s.detach(th)
		}
	}
}

// orphan leaves th to the tracer, to detach or reap later. The main
// thread of a child of this process is not reaped by the tracer: its
// parent can reap it (the kernel treats the parent's thread group as its
// tracer), and waiting for it here would take the exit status away from
// the parent.
func (s *session) orphan(th *tstate) {
	s.tracer.orphans = append(s.tracer.orphans, orphan{pid: s.pid, tid: th.tid, noReap: th.tid == s.pid && s.ourChild})
}

// snapshot assembles the result (after freeze and thaw).
func (s *session) snapshot() *Snapshot {
	pm := NewProcMemory(s.pid)
	snap := &Snapshot{PID: s.pid, Exe: s.exe, Pause: s.end.Sub(s.start), Staggered: s.staggered}
	perThread := s.staggered || s.releasedEarly
	if perThread {
		snap.Pause = 0 // the longest any thread was stopped, below
	}
	if s.started && !s.marks[markFrozen].IsZero() && !s.start.After(s.marks[markFrozen]) {
		snap.StopWait = s.marks[markFrozen].Sub(s.start)
	}
	snap.Phases = s.phases()
	if s.mapsErr == nil {
		snap.Maps, s.mapsErr = procmaps.Parse(s.mapsRaw)
	}
	var regions []target.Region
	for _, th := range s.threads {
		t := Thread{TID: th.tid, Err: th.err, Asleep: th.asleep}
		if th.stopped && s.started {
			t.StopLatency = th.stopAt.Sub(s.start)
			if !th.resumeAt.IsZero() {
				t.Stopped = th.resumeAt.Sub(th.stopAt)
			}
			if perThread {
				snap.Pause = max(snap.Pause, t.Stopped)
			}
			if s.start.After(s.marks[markFrozen]) {
				// Stopped after being left asleep (restopWoken): the
				// wait is that round's.
				snap.StopWait = max(snap.StopWait, t.StopLatency)
			}
		}
		if th.err == nil {
			t.Regs = th.regs
			t.TP = th.tp
			t.Stack = th.stack
			t.switched = th.switched
			if len(th.stack.Data) > 0 {
				regions = append(regions, th.stack)
			}
			regions = append(regions, th.switched...)
		}
		snap.Threads = append(snap.Threads, t)
	}
	sort.Slice(snap.Threads, func(i, j int) bool {
		a, b := snap.Threads[i].TID, snap.Threads[j].TID
		if (a == s.pid) != (b == s.pid) {
			return a == s.pid
		}
		return a < b
	})
	snap.Mem = &target.Snapshot{Regions: regions, Next: pm}
	return snap
}

// phases splits the pause of an unstaggered capture (see PausePhases).
func (s *session) phases() PausePhases {
	p := PausePhases{Asleep: s.asleepN, Woke: s.wokeN, Check: s.checked}
	m := s.marks
	if !s.duringStart.IsZero() && !s.duringEnd.IsZero() {
		p.During = s.duringEnd.Sub(s.duringStart)
		p.DuringOnHelper = s.duringOnHelper
	}
	// With every thread left asleep until one woke, the first stop came
	// after the phases began: only the totals say anything then.
	if !s.started || m[markFrozen].IsZero() || s.start.After(m[markFrozen]) {
		return p
	}
	p.Stop = m[markFrozen].Sub(s.start)
	if !s.staggered && !s.duringStart.IsZero() {
		p.DuringStart = s.duringStart.Sub(m[markFrozen])
	}
	if s.staggered || m[markCopied].IsZero() {
		return p
	}
	p.Maps = m[markMaps].Sub(m[markFrozen])
	p.Stacks = m[markStacks].Sub(m[markMaps])
	p.DuringWait = m[markCopied].Sub(m[markStacks])
	p.Resume = s.end.Sub(m[markCopied])
	return p
}

// exitError reports the process having exited during the capture, or its
// maps having been unreadable. A process gone by the end of the capture
// counts as exited whether or not a detach saw it go: a SIGKILL that
// lands while the threads are stopped does not always make PTRACE_DETACH
// fail (seen under load), and what the snapshot holds is then what was
// copied before the exit either way.
func (s *session) exitError() error {
	if processGone(s.pid) {
		return kindErrorf(ErrExited, "live: process %d exited during the capture; the snapshot holds what was copied before", s.pid)
	}
	if s.mapsErr != nil {
		return fmt.Errorf("live: process %d: reading its maps: %w", s.pid, s.mapsErr)
	}
	return nil
}
