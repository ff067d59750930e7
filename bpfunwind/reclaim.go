package bpfunwind

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/rewindstack/rewind/target"
)

// The rows map is shared by every file and far smaller than what a busy
// host maps over time (a compiler alone takes half of it), so rows are
// reclaimed. Each file's users (the described processes mapping it) are
// tracked; a file no process maps any more is not freed at once (a
// program run again and again would have its libraries compiled each
// time) but is the first evicted when a file does not fit. Then files
// still mapped go, least recently used first: the BPF walk stamps each
// file it uses (struct file_rows's used). An evicted file keeps its index
// (the inodes map and the process descriptions name it) with a count of
// zero, and is loaded again when a process mapping it is described.

// fileState is what user space knows of one file's rows.
type fileState struct {
	path     string
	mod      *target.Module
	first, n uint32       // the rows it holds; n 0: none
	users    map[int]bool // described processes mapping it
	writing  bool         // its rows are being written: not to be evicted
	loads    int          // times its rows were written
	evicted  bool         // its rows were taken back: loaded again when next met
	tooBig   bool         // more rows than the whole map: never loaded
	key      string       // its identity (fileKey): the Unwinder's files map's key
	asked    uint64       // the last time (stampNow) a description named it
	pending  int          // loads of it started and not done
}

// fileRows is the files map's value (struct file_rows).
type fileRows struct {
	First, Count uint32
	Base         uint64
	Used         uint64
}

// stampNow is the BPF walk's clock for the files' last use: CLOCK_MONOTONIC
// (bpf_ktime_get_ns) in units of 2^20 ns.
func stampNow() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano()) >> 20
}

// RowStats are the rows map's use.
type RowStats struct {
	Used, Total uint32
	// Evictions counts the files whose rows were taken back for others
	// since Load.
	Evictions int64
	// Reused counts the file indexes handed to another file (reuseAge).
	Reused int64
	// Largest is the largest run of free rows: far below Total-Used,
	// the free rows are scattered and a large file evicts more.
	Largest uint32
	// Files is how many file indexes are taken, of MaxFiles: once all
	// are, those of files unused for a minute are reused.
	Files int
	// Rules is how many distinct rules the rows share, of MaxRules.
	Rules int
}

// Rows returns how many rows files hold, of how many, how many files
// were evicted so far, the file indexes reused, the largest free run, the
// file indexes taken and the rules the rows share.
func (u *Unwinder) Rows() RowStats {
	u.mu.Lock()
	defer u.mu.Unlock()
	return RowStats{u.pool.alloc.inUse, u.pool.alloc.total, u.pool.evictions, u.pool.reused, u.pool.alloc.largest(), len(u.files), u.rules.count()}
}

// rowsTotal is the size of the rows map as loaded.
func rowsTotal(z Sizes) uint32 {
	if z.Rows == 0 || z.Rows > MaxRows {
		return MaxRows
	}
	return z.Rows
}

// dropUser forgets a process that exited (or can no longer be read) as a
// user of its files: their rows are the first evicted.
func (u *Unwinder) dropUser(pid int) {
	u.mu.Lock()
	u.pool.setUsers(pid, nil)
	u.mu.Unlock()
}

// needsReload reports whether file idx was evicted and should be loaded
// again, and marks it as being loaded. Called with u.mu held.
func (u *Unwinder) needsReload(idx uint32) bool {
	if !u.pool.reload(idx) {
		return false
	}
	if u.loaded != nil {
		delete(u.loaded, idx) // the loader takes it again
	}
	return true
}

// reloadEvicted loads again the evicted files among those of a process
// described unchanged (its walks reaching them end file-not-loaded).
func (u *Unwinder) reloadEvicted(maps []mapping) {
	for _, m := range maps {
		if m.File == anonFile {
			continue
		}
		u.mu.Lock()
		again := u.needsReload(m.File)
		mod := u.fstateMod(m.File)
		u.mu.Unlock()
		if again && mod != nil {
			u.startLoad(m.File, mod, true)
		}
	}
}

// fstateMod is the module of file idx, if known. Called with u.mu held.
func (u *Unwinder) fstateMod(idx uint32) *target.Module {
	if st := u.pool.files[idx]; st != nil {
		return st.mod
	}
	return nil
}

// place finds n rows for file idx, evicting files while no free range
// holds them (rowPool.place), and returns the first row. When it evicted
// a file, it returns after evictGrace: a walk that read the evicted
// file's entry before its count went to zero may still be searching its
// rows, which are about to be overwritten.
func (u *Unwinder) place(idx uint32, n uint32) (uint32, error) {
	u.mu.Lock()
	was := u.pool.evictions
	first, err := u.pool.place(idx, n)
	evicted := u.pool.evictions != was
	u.mu.Unlock()
	if evicted && err == nil {
		time.Sleep(evictGrace)
	}
	return first, err
}

// evictGrace is far longer than a walk takes (microseconds: the BPF
// programs do not sleep), and short beside loading a file.
const evictGrace = 5 * time.Millisecond

// rowPool is the rows map's allocation among files: the allocator, each
// file's state and the processes mapping them. It reads the walk's
// stamps and clears a file's entry in the files map through used and
// clear (the BPF maps; fakes in tests). Its user holds a lock around it.
type rowPool struct {
	alloc     *rowAlloc
	files     map[uint32]*fileState
	procFiles map[int][]uint32 // the files each described process maps
	evictions int64
	reused    int64                           // file indexes handed to another file
	used      func(idx uint32) (uint64, bool) // the walk's last use of a file
	clear     func(idx uint32) error          // the file's count to zero
	now       func() uint64                   // the walk's clock (stampNow)
}

// reloadGuard is how recently a file still mapped must have been used for
// a file loaded again (one evicted before) not to evict it: two running
// programs whose files do not fit together would otherwise take the rows
// from each other at every ask, each load compiling a whole table. A file
// met for the first time evicts by recency alone, so that new processes
// are walked; the one it evicted gets its rows back once the other is
// idle or gone. In stamp units (2^20 ns): about a second.
const reloadGuard = 1 << 10

// errNoRoomYet is a reload that found no file idle enough to evict: not
// noted (it is tried again at the next ask).
var errNoRoomYet = errors.New("no room for an evicted file yet")

// newRowPool returns a pool of total rows, all free.
func newRowPool(total uint32, used func(uint32) (uint64, bool), clear func(uint32) error) *rowPool {
	return &rowPool{alloc: newRowAlloc(total), files: map[uint32]*fileState{}, procFiles: map[int][]uint32{}, used: used, clear: clear, now: stampNow}
}

// place finds n rows for file idx, evicting files while no free range
// holds them: first those no described process maps, then the least
// recently used (by the walk's stamps), but for a file loaded again not
// those used in the last reloadGuard. The file is marked as being
// written until written says it is done.
func (p *rowPool) place(idx uint32, n uint32) (uint32, error) {
	st := p.state(idx, nil)
	reload, now := st.loads > 0, p.now()
	if first, ok := p.alloc.alloc(n); ok {
		st.first, st.n, st.writing = first, n, true
		return first, nil
	}
	type cand struct {
		idx    uint32
		mapped bool
		used   uint64
	}
	var cands []cand
	pinned := uint32(0) // rows no eviction frees
	for i, s := range p.files {
		if i == idx || s.n == 0 || s.writing {
			pinned += s.n
			continue
		}
		used, ok := p.used(i)
		mapped := len(s.users) > 0
		if !ok || reload && mapped && used+reloadGuard > now {
			pinned += s.n
			continue
		}
		cands = append(cands, cand{i, mapped, used})
	}
	if p.alloc.total-pinned < n {
		// Evicting every other file would not make room: none is.
		st.evicted = true // tried again when next met
		if reload {
			return 0, errNoRoomYet
		}
		return 0, fmt.Errorf("%s: %d rows do not fit in the BPF rows map now (%d of %d held by files being loaded)", st.path, n, pinned, p.alloc.total)
	}
	sort.Slice(cands, func(a, b int) bool {
		x, y := cands[a], cands[b]
		if x.mapped != y.mapped {
			return !x.mapped
		}
		if x.used != y.used {
			return x.used < y.used
		}
		return x.idx < y.idx
	})
	for _, c := range cands {
		if err := p.evict(c.idx); err != nil {
			return 0, err
		}
		if first, ok := p.alloc.alloc(n); ok {
			st.first, st.n, st.writing = first, n, true
			return first, nil
		}
	}
	st.evicted = true
	if reload {
		return 0, errNoRoomYet
	}
	return 0, fmt.Errorf("%s: %d rows do not fit in the BPF rows map now (%d of %d used)", st.path, n, p.alloc.inUse, p.alloc.total)
}

// evict takes back the rows of file idx: its count goes to zero before
// its rows are handed to another file, so that no walk uses another
// file's rows for it.
func (p *rowPool) evict(idx uint32) error {
	st := p.files[idx]
	if err := p.clear(idx); err != nil {
		return fmt.Errorf("evicting %s from the BPF files map: %v", st.path, err)
	}
	p.alloc.release(st.first, st.n)
	st.first, st.n, st.evicted = 0, 0, true
	p.evictions++
	return nil
}

// written marks file idx's rows as written (ok) or gives them back.
func (p *rowPool) written(idx uint32, ok bool) {
	st := p.files[idx]
	st.writing = false
	if ok {
		st.loads++
	} else {
		p.alloc.release(st.first, st.n)
		st.first, st.n = 0, 0
	}
}

// state returns the state of file idx, made on first use.
func (p *rowPool) state(idx uint32, mod *target.Module) *fileState {
	st := p.files[idx]
	if st == nil {
		st = &fileState{users: map[int]bool{}}
		p.files[idx] = st
	}
	if mod != nil {
		st.mod, st.path = mod, mod.Path
	}
	return st
}

// setUsers records the files a process was described with (nil: none,
// it exited), and forgets it as a user of the files it mapped before.
func (p *rowPool) setUsers(pid int, files []uint32) {
	for _, f := range p.procFiles[pid] {
		if st := p.files[f]; st != nil {
			delete(st.users, pid)
		}
	}
	if files == nil {
		delete(p.procFiles, pid)
		return
	}
	p.procFiles[pid] = files
	for _, f := range files {
		if st := p.files[f]; st != nil {
			st.users[pid] = true
		}
	}
}

// reload reports whether file idx was evicted and should be loaded
// again, and marks it as no longer evicted.
func (p *rowPool) reload(idx uint32) bool {
	st := p.files[idx]
	if st == nil || !st.evicted || st.tooBig {
		return false
	}
	st.evicted = false
	return true
}

// written marks file idx's rows as written (ok) or gives them back.
func (u *Unwinder) written(idx uint32, ok bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.pool.written(idx, ok)
}

// A long run meets many more files than the files map's MaxFiles indexes
// (every build of a program is another file, another build-id): without
// reuse, a file met after the last index never had rows, and its walks
// ended file-not-loaded for good. Once every index is taken, the index of
// a file that no process was described with for reuseAge is handed to the
// new file: its rows taken back, and every entry naming it (the inodes and
// Go files maps, the loader's marks) removed first, so that nothing the
// program or a description finds names the old file. Met again, the old
// file gets an index anew.
const reuseAge = 60 << 10 // stamp units (2^20 ns): about a minute

// reusable returns the index of the file asked for longest ago among those
// no described process maps (busy: the files the last descriptions name),
// none of whose loads is pending, that were not asked for in reuseAge.
func (p *rowPool) reusable(busy map[uint32]bool) (uint32, bool) {
	now := p.now()
	var best uint32
	var bestAsked uint64
	found := false
	for i, s := range p.files {
		if len(s.users) > 0 || busy[i] || s.writing || s.pending > 0 || s.asked+reuseAge > now {
			continue
		}
		if !found || s.asked < bestAsked || s.asked == bestAsked && i < best {
			best, bestAsked, found = i, s.asked, true
		}
	}
	return best, found
}

// reuseIndex frees a file index for a new file once every one is taken
// (reusable), and whether its rows were evicted (the caller waits
// evictGrace before the new file's rows may take them). Called with u.mu
// held.
func (u *Unwinder) reuseIndex() (idx uint32, evicted, ok bool) {
	busy := map[uint32]bool{}
	for _, d := range u.described {
		for _, m := range d.maps {
			busy[m.File] = true
		}
	}
	idx, ok = u.pool.reusable(busy)
	if !ok {
		return 0, false, false
	}
	st := u.pool.files[idx]
	if st.n > 0 {
		if err := u.pool.evict(idx); err != nil {
			return 0, false, false
		}
		evicted = true
	}
	for k, v := range u.inodes {
		if v.file == idx {
			if err := u.objs.Inodes.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return 0, false, false // still found through its inode: kept
			}
			delete(u.inodes, k)
		}
	}
	if err := u.objs.Gofiles.Delete(idx); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return 0, false, false
	}
	delete(u.files, st.key)
	delete(u.pool.files, idx)
	delete(u.loaded, idx)
	delete(u.later, idx)
	u.pool.reused++
	return idx, evicted, true
}

// loadStarted and loadDone count file idx's loads in flight, which keep
// its index from being reused.
func (u *Unwinder) loadStarted(idx uint32) {
	u.mu.Lock()
	if st := u.pool.files[idx]; st != nil {
		st.pending++
	}
	u.mu.Unlock()
}

func (u *Unwinder) loadDone(idx uint32) {
	u.mu.Lock()
	if st := u.pool.files[idx]; st != nil && st.pending > 0 {
		st.pending--
	}
	u.mu.Unlock()
}
