package dump

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// earlyOpen does, while a live process is being stopped and copied,
// the work of a dump that needs only the process's mappings, which
// /proc/PID/maps lists before the capture: opening the mapped objects
// (as the snapshot's target would), and for the objects frames are
// expected in, reading their unwind tables, symbol tables and DWARF
// indexes from the cache, or starting to read their debug information.
// A capture mostly waits for the threads to stop, so this runs beside
// it; in a warm dump it took 8 to 10 ms after the capture.
//
// The objects expected to hold frames are the executable and those
// holding the threads' current PCs as /proc/PID/task/TID/syscall tells
// them for threads blocked in the kernel (read without stopping them;
// the capture gives the real ones, this only chooses what to read early).
//
// Objects are opened by the mappings read before the capture; settle,
// called with the snapshot, makes the objects whose mappings changed in
// between be opened again from the snapshot's.
type earlyOpen struct {
	pid  int
	maps []target.Mapping // read before the capture

	mu   sync.Mutex
	open []target.Mapping // what open opens from: maps, then the snapshot's

	tid         int  // the thread the early work runs on, once lowered (under mu)
	capturedYet bool // captured was called (under mu)

	done sync.WaitGroup // the early work running
}

// startEarly starts the early work on process pid, whose mappings are
// maps, in the background; nil when the mappings could not be read or
// objs opens objects its own way. tables says whether walks use unwind
// tables.
func startEarly(pid int, objs *target.Objects, sym *symbolize.Symbolizer, tables bool, maps []target.Mapping) *earlyOpen {
	if maps == nil || objs.Open != nil {
		return nil
	}
	e := &earlyOpen{pid: pid, maps: maps, open: maps}
	objs.Open = e.openObject
	// On a thread in the SCHED_IDLE class until the capture ends: it
	// runs only where neither the tracer nor the target's threads (which
	// must run to stop, and wait for the tracer while it copies) want a
	// CPU (at nice 10 it lengthened the pause by 0.8 ms: median, warm,
	// load 7). It takes one P: the capture's goroutines take turns on the
	// other (the caller waits for the tracer). With a P added for it, a
	// warm dump touched 80 more pages (the P's own caches), and setting
	// GOMAXPROCS back after the capture stopped the world, waiting for
	// this goroutine (2 to 4 ms).
	e.done.Add(1)
	go func() {
		defer e.done.Done()
		runtime.LockOSThread()
		t := threadID()
		lowered := false
		e.mu.Lock()
		if !e.capturedYet {
			lowered = setIdle(t, true)
			e.tid = t
		}
		e.mu.Unlock()
		e.run(objs, sym, tables)
		// A thread whose priority could not be set back ends with this
		// goroutine (it stays locked).
		if !lowered || setIdle(t, false) {
			runtime.UnlockOSThread()
		}
	}()
	return e
}

// maxHintThreads bounds the threads whose PCs the early work reads: they
// only choose what to read early, and most threads of a large process
// wait in the same few places.
const maxHintThreads = 64

// wait returns once the early work is over: a dump waits for it before
// saving what it read to the cache.
func (e *earlyOpen) wait() {
	if e != nil {
		e.done.Wait()
	}
}

// openObject opens an object of the process by the mappings known now.
func (e *earlyOpen) openObject(path string) (*elfobj.File, error) {
	e.mu.Lock()
	maps := e.open
	e.mu.Unlock()
	return live.OpenMapped(e.pid, maps, path)
}

// run opens every mapped object, then prepares the ones frames are
// expected in.
func (e *earlyOpen) run(objs *target.Objects, sym *symbolize.Symbolizer, tables bool) {
	space := target.NewAddressSpace(e.maps, objs)
	var starts []symbolize.Want
	var mods []*target.Module
	seen := map[*target.Module]bool{}
	add := func(m *target.Mapping) bool {
		if m == nil || m.Module == nil || m.Module.File == nil {
			return false
		}
		if !seen[m.Module] {
			seen[m.Module] = true
			mods = append(mods, m.Module)
		}
		return true
	}
	for _, pc := range threadPCs(e.pid) {
		if m := space.Find(pc); add(m) {
			starts = append(starts, symbolize.Want{Map: m, PC: pc, Exact: true})
		}
	}
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", e.pid)); err == nil {
		exe = strings.TrimSuffix(exe, " (deleted)")
		for _, m := range space.Mappings() {
			if m.Path == exe && m.Module != nil {
				add(m)
				break
			}
		}
	}
	// All in this goroutine: the capture's tracer needs the other CPU
	// (with both taken by this work, the capture took twice as long).
	for _, mod := range mods {
		if tables {
			unwind.Prepare(mod)
		}
		sym.PrepareModule(mod)
	}
	sym.ReadAhead(starts)
}

// captured is called when the capture is over: the early work goes on at
// the priority of the rest of the dump, which may wait for it now.
func (e *earlyOpen) captured() {
	if e == nil {
		return
	}
	e.mu.Lock()
	e.capturedYet = true
	if e.tid != 0 {
		setIdle(e.tid, false)
	}
	e.mu.Unlock()
}

// settle is called with the snapshot before its target is made: objects
// are opened by its mappings from now on, and an object opened early
// whose first mapping (the one opened through /proc/PID/map_files) is not
// the same in the snapshot is forgotten, so that the target opens it
// again.
func (e *earlyOpen) settle(snap *live.Snapshot, objs *target.Objects) {
	if e == nil {
		return
	}
	e.mu.Lock()
	e.open = snap.Maps
	e.mu.Unlock()
	now := firstMappings(snap.Maps)
	for path, m := range firstMappings(e.maps) {
		if n, ok := now[path]; !ok || n.Start != m.Start || n.End != m.End || n.Offset != m.Offset ||
			n.Dev != m.Dev || n.Inode != m.Inode || n.Deleted != m.Deleted {
			objs.Forget(path)
		}
	}
}

// firstMappings returns the first mapping of each file path.
func firstMappings(maps []target.Mapping) map[string]target.Mapping {
	out := map[string]target.Mapping{}
	for _, m := range maps {
		if _, ok := out[m.Path]; !ok && m.IsFile() {
			out[m.Path] = m
		}
	}
	return out
}

// threadPCs returns the user-space PC of each thread of process pid that
// is blocked in the kernel (of the first maxHintThreads), from
// /proc/PID/task/TID/syscall (whose last field is the PC; a running
// thread's reads "running").
func threadPCs(pid int) []uint64 {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var pcs []uint64
	for _, ent := range ents[:min(len(ents), maxHintThreads)] {
		b, err := os.ReadFile(dir + "/" + ent.Name() + "/syscall")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) < 3 {
			continue
		}
		if pc, err := strconv.ParseUint(strings.TrimPrefix(f[len(f)-1], "0x"), 16, 64); err == nil && pc != 0 {
			pcs = append(pcs, pc)
		}
	}
	return pcs
}
