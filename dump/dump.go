// Package dump is the pipeline behind `rewind dump`: it captures a live
// process (Live) or opens a core file (Core), unwinds every thread, the
// fibers and the language runtimes' frames asked for, and names the
// frames, returning the report the command prints. LiveGoroutines and
// CoreGoroutines list a Go program's goroutines instead, as a
// traceback.Report that package traceback writes as Go prints it.
//
// A live process is stopped only while its threads' registers and stacks
// are copied (or, with Options.Lazy, while it is unwound); the objects it
// maps are opened and their tables read while the threads are being
// stopped, so that little is left after the pause. Threads blocked in the
// kernel are read in place, without being stopped, where BPF allows it.
//
// The package prints nothing: warnings go to Options.Warn, the phases of
// a dump to Options.Phase. Settings that apply to the whole process (how
// object files are read into memory) are options too, applied by the dump
// that asks for them.
package dump

import (
	"time"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/fibers"
	"github.com/rewindstack/rewind/goroutines"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/locate"
	"github.com/rewindstack/rewind/runtimes"
	_ "github.com/rewindstack/rewind/runtimes/builtin" // every runtime rewind ships, in runtimes.All
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// Options says what a dump reads and how. The zero value dumps every
// thread with the default unwinder, inlined calls listed, every
// registered runtime's frames, no fibers and no cache.
type Options struct {
	// Unwinder walks the stacks; nil: unwind.NewAuto().
	Unwinder *unwind.Unwinder
	// Threads, when not empty, selects the threads dumped by TID.
	Threads []int

	// NoInlines lists physical frames only; by default inlined calls are
	// listed (marked) above the frame they were inlined into, as
	// eu-stack -i and gdb show them. Goroutine dumps always list them,
	// as Go's traceback does.
	NoInlines bool
	// TailCalls also lists the functions that left by a tail call, where
	// DWARF call-site information tells them for sure.
	TailCalls bool
	// CacheDir, when not empty, is the persistent cache of unwind tables
	// and DWARF indexes, read and added to (see symbolize's incremental
	// cache); the caller has checked that it may trust it.
	CacheDir string
	// MapSections maps large sections of object files rather than
	// copying them (elfobj.MapSections): fewer pages touched by a
	// short-lived process. It applies to the whole process, from the
	// dump on.
	MapSections bool
	// BuffersOutsideHeap keeps the symbolizer's large buffers out of the
	// Go heap (symbolize.BuffersOutsideHeap), for the whole process, from
	// the dump on.
	BuffersOutsideHeap bool

	// Lazy unwinds a live process while its threads are stopped, reading
	// memory on demand: slower for the target, but no stack is cut at
	// MaxStack. MaxStopped bounds how long (zero:
	// live.DefaultMaxStopped; negative: no bound).
	Lazy       bool
	MaxStopped time.Duration
	// MaxStack is the number of bytes of stack copied per thread (zero:
	// live.DefaultMaxStack).
	MaxStack int
	// MaxPause bounds how long a slow thread holds up the others (see
	// live.Options.MaxPause; zero: live.DefaultMaxPause, negative: wait
	// for every thread). Ignored with Lazy.
	MaxPause time.Duration
	// Stop stops every thread to read it. By default, unless Lazy or
	// Threads is set, the threads blocked in the kernel are read in
	// place through a BPF task iterator, and only the others stopped.
	Stop bool
	// InPlaceUnavailable, when set, is called when the blocked threads
	// cannot be read in place and every thread is stopped instead; why
	// names the privileges needed, or the kernel's reason when running
	// as root.
	InPlaceUnavailable func(why string)

	// Fibers are saved contexts of inactive fibers or coroutines to
	// unwind too (listed after the threads).
	Fibers []fibers.Spec
	// AllFibers unwinds every inactive fiber of the fiber runtimes
	// package fibers recognizes (Tarantool), under its thread.
	AllFibers bool
	// FiberScan searches the target's writable memory for saved
	// contexts no thread runs on, within FiberScanLimits.
	FiberScan       bool
	FiberScanLimits fibers.ScanLimits
	// NoRuntimes names the registered runtimes (runtimes.All) whose
	// frames are left out.
	NoRuntimes []string

	// Resolver, for a core, makes the lookup chain of the core's files
	// (locate.Resolver), given the executable's path the core names; nil:
	// the files are read at the paths the core names.
	Resolver func(exe string) (*locate.Resolver, error)

	// Warn receives the problems that do not stop the dump (an object
	// that cannot be opened, fibers not found); nil: they are dropped.
	Warn func(msg string)
	// Phase, when set, is called as each phase of the dump ends
	// ("capture", "open", "unwind", "symbolize", ...), for timings.
	Phase func(name string)
	// Paused, when set, is called with a live target's snapshot once it
	// is captured, and the goroutines read in its pause (nil for thread
	// dumps), for what the pause's statistics tell.
	Paused func(snap *live.Snapshot, set *goroutines.Set)
	// Pending, when set, receives what is left to do after the report:
	// writing what the dump read to the cache, which its caller may do
	// once its output is out (Pending.Wait). When nil, the dump waits
	// for it before returning.
	Pending *Pending
}

// Pending is the work a dump leaves after its report (Options.Pending).
type Pending struct {
	save func()
}

// Wait does what the dump left to do: it returns once what the dump read
// is saved to the cache. Waiting on a Pending no dump was given returns
// at once.
func (p *Pending) Wait() {
	if p != nil && p.save != nil {
		save := p.save
		p.save = nil
		save()
	}
}

// pipe is one dump's state: its options and what they made.
type pipe struct {
	opt  Options
	u    *unwind.Unwinder
	sym  *symbolize.Symbolizer
	objs *target.Objects
	// early is the early work of a live dump (see earlyOpen), waited for
	// before the cache is saved.
	early *earlyOpen
}

// newPipe makes the symbolizer and objects of a dump with opt, and
// applies its process-wide settings.
func newPipe(opt Options) *pipe {
	p := &pipe{opt: opt, u: opt.Unwinder}
	if p.u == nil {
		p.u = unwind.NewAuto()
	}
	p.sym = &symbolize.Symbolizer{Inlines: !opt.NoInlines, TailCalls: opt.TailCalls}
	if opt.MapSections {
		elfobj.MapSections(true)
	}
	if opt.BuffersOutsideHeap {
		symbolize.BuffersOutsideHeap(true)
	}
	p.objs = &target.Objects{}
	// Unwind tables of the FDEs the frames are in, not whole objects.
	p.objs.Tables.Partial = true
	if opt.CacheDir != "" {
		// A dump reads as little DWARF as its frames need, and keeps it.
		p.sym.Cache = symbolize.NewIncrementalCache(opt.CacheDir)
		p.objs.Tables.Dir = opt.CacheDir
		p.objs.Tables.SaveLater = true // written while the dump goes on
	}
	return p
}

// finish hands the saving of what the dump read to opt.Pending, or saves
// it now.
func (p *pipe) finish() {
	save := func() {
		// What the symbolizer read of debug files goes to the cache
		// once the stacks are out, beside the unwind tables.
		p.early.wait() // what the early work read is saved too
		saved := make(chan struct{})
		go func() { p.objs.Tables.Wait(); close(saved) }()
		p.sym.Flush()
		<-saved
	}
	if p.opt.Pending != nil {
		p.opt.Pending.save = save
		return
	}
	save()
}

// warn says msg to opt.Warn.
func (p *pipe) warn(msg string) {
	if p.opt.Warn != nil {
		p.opt.Warn(msg)
	}
}

// mark ends the phase called name.
func (p *pipe) mark(name string) {
	if p.opt.Phase != nil {
		p.opt.Phase(name)
	}
}

// runtimes returns the registered runtimes opt.NoRuntimes leaves in, in
// registry order.
func (p *pipe) runtimes() []runtimes.Runtime {
	var out []runtimes.Runtime
	for _, r := range runtimes.All() {
		left := false
		for _, n := range p.opt.NoRuntimes {
			left = left || n == r.Name()
		}
		if c, ok := r.(runtimes.Configurable); ok && !left {
			r = c.With(runtimes.Options{Fibers: p.anyFibers()})
		}
		if !left {
			out = append(out, r)
		}
	}
	return out
}

// anyFibers reports whether fibers are asked for.
func (p *pipe) anyFibers() bool {
	return len(p.opt.Fibers) > 0 || p.opt.AllFibers || p.opt.FiberScan
}

// readsTables reports whether the unwinder's walks read unwind tables
// (CFI), which the early work then prepares.
func (p *pipe) readsTables() bool {
	for _, s := range p.u.Steppers {
		if _, ok := s.(unwind.CFITable); ok {
			return true
		}
	}
	return false
}
