package bpfunwind

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/rewindstack/rewind/internal/procmaps"
	"github.com/rewindstack/rewind/target"
)

// Describe reads a process's executable mappings from /proc, loads the
// rows of files not loaded yet (or hands them to the loader goroutine,
// Options.LoadInBackground) and tells the program the process's
// mappings. A process that exited is forgotten by the program (its
// mappings stay known here, for symbolizing its stacks).
func (u *Unwinder) Describe(pid int) error { return u.describe(pid, true) }

// DescribeLater is Describe for a process not sampled yet (the agent's
// start): with Options.LoadInBackground its files are loaded after those
// of the processes the program asked about.
func (u *Unwinder) DescribeLater(pid int) error { return u.describe(pid, false) }

func (u *Unwinder) describe(pid int, urgent bool) error {
	if u.opt.Skip != nil && pid != os.Getpid() && u.opt.Skip(pid) {
		u.quieten(pid)
		return nil
	}
	began := time.Now()
	path := "/proc/" + strconv.Itoa(pid) + "/maps"
	text, err := os.ReadFile(path)
	if err != nil {
		u.objs.Procs.Delete(uint32(pid))
		u.dropUser(pid)
		return err
	}
	// The program asks again when a walk meets a PC outside the described
	// mappings (code in anonymous memory, a JIT's), at most every 10 ms:
	// while the executable mappings are those described, the process's
	// entry is only put back (an exec of an identical image removed it).
	sum := execSum(text)
	u.mu.Lock()
	last, seen := u.described[pid]
	gen := uint32(u.gen[pid])
	u.mu.Unlock()
	if seen && last.sum == sum {
		var p proc
		p.N = uint32(copy(p.Maps[:], last.maps))
		p.Gen = gen // the stacks walked with it are named with that description
		u.work.unchanged.Add(1)
		u.reloadEvicted(last.maps)
		u.quieten(pid)
		return u.objs.Procs.Update(uint32(pid), &p, ebpf.UpdateAny)
	}
	defer func() { u.work.describeNS.Add(int64(time.Since(began))) }()
	u.work.described.Add(1)
	maps, err := procmaps.Parse(text)
	if err != nil {
		u.objs.Procs.Delete(uint32(pid))
		return fmt.Errorf("%s: %w", path, err)
	}
	space := target.NewAddressSpace(maps, u.opt.Objects)
	self := u.opt.SkipSelf && pid == os.Getpid()
	p, kept := u.execMappings(pid, space, self, urgent)
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	u.mu.Lock()
	u.procMaps[pid] = kept
	u.comms[pid] = strings.TrimSpace(string(comm))
	// A description like the last keeps its generation, so that the
	// stacks walked with either stay one (a process with code outside
	// its files is described again whenever the walk meets it).
	if prev, ok := u.history[pid][u.gen[pid]]; !ok || !sameMappings(prev, kept) {
		u.gen[pid]++
	}
	p.Gen = uint32(u.gen[pid])
	h := u.history[pid]
	if h == nil {
		h = map[int][]target.Mapping{}
		u.history[pid] = h
	}
	h[u.gen[pid]] = kept
	delete(h, u.gen[pid]-historyLen)
	u.described[pid] = describedProc{sum: sum, maps: append([]mapping(nil), p.Maps[:p.N]...)}
	files := make([]uint32, 0, p.N)
	for _, m := range p.Maps[:p.N] {
		if m.File != anonFile {
			files = append(files, m.File)
		}
	}
	u.pool.setUsers(pid, files)
	u.mu.Unlock()
	if err := u.objs.Procs.Update(uint32(pid), &p, ebpf.UpdateAny); err != nil {
		u.note("the BPF process map is full")
		return err
	}
	if !self {
		u.describeInterp(pid, maps)
	}
	return nil
}

// execMappings returns the description of a process's executable
// mappings (at most MaxMaps: its files first, then its anonymous code) and
// the mappings themselves.
func (u *Unwinder) execMappings(pid int, space *target.AddressSpace, self, urgent bool) (proc, []target.Mapping) {
	var p proc
	var kept []target.Mapping
	var anon []mapping
	for _, m := range space.Mappings() {
		if !m.Executable() {
			continue
		}
		kept = append(kept, *m)
		if p.N == MaxMaps {
			u.note(fmt.Sprintf("process %d has more than %d executable mappings", pid, MaxMaps))
			break
		}
		file, bias, ok := uint32(0), uint64(0), false
		if self || u.isSelfExe(m) {
			file, ok = u.selfFile()
		} else {
			file, bias, ok = u.fileOf(m, urgent)
		}
		if !ok && !m.IsFile() && m.Path != target.VDSOPath {
			// Anonymous executable memory, a JIT's code: described
			// where there is room, so that the walk takes its frame
			// pointers at once (the program finds one VMA a run by
			// itself: bpf_find_vma is busy for the next until its
			// lock is let go).
			anon = append(anon, mapping{Start: m.Start, End: m.End, File: anonFile})
			continue
		}
		if !ok {
			continue
		}
		p.Maps[p.N] = mapping{Start: m.Start, End: m.End, Bias: bias, File: file}
		p.N++
	}
	for _, a := range anon {
		if p.N == MaxMaps {
			break
		}
		p.Maps[p.N] = a
		p.N++
	}
	sort.Slice(p.Maps[:p.N], func(i, j int) bool { return p.Maps[i].Start < p.Maps[j].Start })
	return p, kept
}

// sameMappings reports whether two descriptions map the same files at the
// same addresses.
func sameMappings(a, b []target.Mapping) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := &a[i], &b[i]
		if x.Start != y.Start || x.End != y.End || x.Offset != y.Offset || x.Path != y.Path || x.Dev != y.Dev || x.Inode != y.Inode {
			return false
		}
	}
	return true
}

// historyLen is how many descriptions of a process are kept for naming
// the stacks walked with them: a period's stacks span the descriptions
// made in it (a process that maps and unmaps libraries more often than
// that between two reads has its older stacks named with the newest).
const historyLen = 16

// describedProc is what a process was last described with: a sum of the
// executable lines of its maps file, and the program's mappings.
type describedProc struct {
	sum  uint64
	maps []mapping
	// quiet is how long the program waits before asking about the
	// process again after an answer that found it unchanged: doubled
	// with each such answer, up to maxQuiet.
	quiet time.Duration
}

// maxQuiet bounds how long a process whose walks meet code outside its
// files (a JIT's, a memfd executable) is not described again. Changes of
// its mappings are told at once regardless (mmap, munmap, exec).
const maxQuiet = 5 * time.Second

// quieten doubles how long the program waits before asking about pid
// again: a process asked about and found unchanged has code outside its
// files, which every walk through it meets (or is skipped).
func (u *Unwinder) quieten(pid int) {
	u.mu.Lock()
	d := u.described[pid]
	d.quiet = min(max(2*d.quiet, 20*time.Millisecond), maxQuiet)
	u.described[pid] = d
	u.mu.Unlock()
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) // the program's clock
	u.objs.Asked.Update(uint32(pid), uint64(ts.Nano())+uint64(d.quiet), ebpf.UpdateAny)
}

// execSum sums the lines of a maps file that map code (FNV-1a).
func execSum(text []byte) uint64 {
	h := uint64(0xcbf29ce484222325)
	for len(text) > 0 {
		line := text
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = nil
		}
		// "start-end perms ...": the third permission letter.
		sp := bytes.IndexByte(line, ' ')
		if sp < 0 || sp+3 >= len(line) || line[sp+3] != 'x' {
			continue
		}
		for _, c := range line {
			h = (h ^ uint64(c)) * 0x100000001b3
		}
		h = (h ^ '\n') * 0x100000001b3
	}
	return h
}

// WorkStats count what user space did for the program since it was
// loaded.
type WorkStats struct {
	Described int64         // processes described (their mappings read and told)
	Unchanged int64         // descriptions asked for whose code mappings had not changed
	Exits     int64         // process exits the program announced
	Files     int64         // files whose rows were loaded
	Evicted   int64         // files whose rows were taken back for others (RowStats.Evictions)
	Describe  time.Duration // time spent describing (files loaded in the background apart)
	Load      time.Duration // time spent building, compiling and writing files' rows
}

// workCounters are WorkStats as they are counted.
type workCounters struct {
	described, unchanged, exits, files atomic.Int64
	describeNS, loadNS                 atomic.Int64
}

// Work returns what user space did for the program so far.
func (u *Unwinder) Work() WorkStats {
	w := &u.work
	return WorkStats{w.described.Load(), w.unchanged.Load(), w.exits.Load(), w.files.Load(), u.Rows().Evictions,
		time.Duration(w.describeNS.Load()), time.Duration(w.loadNS.Load())}
}

// isSelfExe reports, under Options.SkipSelf, whether a mapping is of this
// process's executable: a child this process forks runs it until its
// exec, which is too short to be worth loading a large Go program's rows.
func (u *Unwinder) isSelfExe(m *target.Mapping) bool {
	if !u.opt.SkipSelf || u.selfIno == 0 {
		return false
	}
	if m.Inode != u.selfIno {
		return false
	}
	dev, ok := kernelDev(m.Dev)
	return ok && dev == u.selfDev
}

// selfFile returns the index of the file without rows that this
// process's mappings are described with under Options.SkipSelf.
func (u *Unwinder) selfFile() (uint32, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	idx, ok := u.files["self"]
	if !ok && len(u.files) < u.maxFiles {
		idx, ok = uint32(len(u.files)), true
		u.files["self"] = idx
	}
	return idx, ok
}

// Maps returns the executable mappings a process was last described with.
func (u *Unwinder) Maps(pid int) []target.Mapping {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.procMaps[pid]
}

// note counts a period-line note.
func (u *Unwinder) note(s string) {
	u.mu.Lock()
	u.notes[s]++
	u.mu.Unlock()
}

// Notes returns and clears the notes since the last call (files that did
// not fit, full maps), each with how often it happened.
func (u *Unwinder) Notes() map[string]int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := u.notes
	u.notes = map[string]int{}
	return n
}

// fileIndex returns the index of the file with this key in the program's
// files map, giving it one on first use and loading its rows then: at
// once, or with Options.LoadInBackground by the loader goroutine (until
// its rows are written, the file's count is zero and walks reaching it
// end file-not-loaded). A file whose rows cannot be loaded is noted for
// the period line; ok is false when the files map is full.
func (u *Unwinder) fileIndex(key string, mod *target.Module, urgent bool) (idx uint32, ok bool) {
	u.mu.Lock()
	if idx, ok := u.files[key]; ok {
		if st := u.pool.files[idx]; st != nil {
			st.asked = u.pool.now()
		}
		// A file evicted to make room for others is loaded again.
		if u.needsReload(idx) {
			u.pool.state(idx, mod)
			u.mu.Unlock()
			u.startLoad(idx, mod, urgent)
			return idx, true
		}
		// A file queued behind the host's (the agent's start) that a
		// sampled process maps goes ahead.
		promote := urgent && u.later[idx]
		delete(u.later, idx)
		u.mu.Unlock()
		if promote {
			u.loadStarted(idx)
			u.queue(u.urgentLoads, fileLoad{idx, mod})
		}
		return idx, true
	}
	idx = uint32(len(u.files))
	evicted := false
	if len(u.files) >= u.maxFiles {
		if idx, evicted, ok = u.reuseIndex(); !ok {
			u.mu.Unlock()
			u.note(fmt.Sprintf("the BPF files map is full (%d files, none unused for a minute): %s not loaded", u.maxFiles, mod.Path))
			return 0, false
		}
	}
	u.files[key] = idx
	st := u.pool.state(idx, mod)
	st.key, st.asked = key, u.pool.now()
	u.mu.Unlock()
	if evicted {
		// A walk that read the old file's entry may still be searching
		// its rows (place).
		time.Sleep(evictGrace)
	}
	u.startLoad(idx, mod, urgent)
	return idx, true
}

// startLoad loads file idx's rows: at once, or with
// Options.LoadInBackground by the loader goroutine (urgent: ahead of the
// files queued at the agent's start).
func (u *Unwinder) startLoad(idx uint32, mod *target.Module, urgent bool) {
	u.loadStarted(idx)
	if u.loads != nil && !urgent {
		u.mu.Lock()
		u.later[idx] = true
		u.mu.Unlock()
	}
	if u.loads != nil {
		q := u.loads
		if urgent {
			q = u.urgentLoads
		}
		u.queue(q, fileLoad{idx, mod})
		return
	}
	if err := u.loadRows(idx, mod); err != nil {
		u.note(err.Error())
	}
	u.loadDone(idx)
}

// queue hands a file to the loader goroutine.
func (u *Unwinder) queue(q chan fileLoad, l fileLoad) {
	u.pending.Lock()
	u.queued++
	u.pending.Unlock()
	q <- l
}

// fileLoad is a file whose rows the loader goroutine is to load.
type fileLoad struct {
	idx uint32
	mod *target.Module
}

// loader loads the rows of the files fileIndex hands it on q, so that
// describing a process (an exec, a new process) never waits for a large
// file's table to be built and compiled. Two run: one for the files of
// processes the program asked about, one for the rest (the host's, at
// the agent's start), so that a sampled process never waits for those.
func (u *Unwinder) loader(q <-chan fileLoad) {
	defer u.loaderDone.Done()
	for l := range q {
		u.mu.Lock()
		done := u.loaded[l.idx]
		u.loaded[l.idx] = true
		delete(u.later, l.idx)
		u.mu.Unlock()
		if !done && !u.closing.Load() {
			if err := u.loadRows(l.idx, l.mod); err != nil {
				u.note(err.Error())
			}
		}
		u.loadDone(l.idx)
		u.pending.Lock()
		u.queued--
		if u.queued == 0 && u.idle != nil {
			close(u.idle)
			u.idle = nil
		}
		u.pending.Unlock()
	}
}

// WaitLoaded waits until the rows of every file met so far are loaded
// (with Options.LoadInBackground), or for at most limit.
func (u *Unwinder) WaitLoaded(limit time.Duration) {
	u.pending.Lock()
	if u.queued == 0 {
		u.pending.Unlock()
		return
	}
	if u.idle == nil {
		u.idle = make(chan struct{})
	}
	idle := u.idle
	u.pending.Unlock()
	select {
	case <-idle:
	case <-time.After(limit):
	}
}

// fileOf returns the index of a mapping's file in the program's files map,
// loading its rows on first use, and the mapping's load bias.
func (u *Unwinder) fileOf(m *target.Mapping, urgent bool) (uint32, uint64, bool) {
	mod, bias := m.Module, m.Bias
	if m.Path == target.VDSOPath {
		if mod = u.vdso(); mod != nil && mod.File != nil {
			b, err := mod.File.Bias(m.Start, m.Offset)
			if err != nil {
				return 0, 0, false
			}
			bias = b
		}
	}
	if mod == nil || mod.File == nil {
		return 0, 0, false
	}
	idx, ok := u.fileIndex(fileKey(mod, m), mod, urgent)
	if !ok {
		return 0, 0, false
	}
	// A file without rows: its stacks end file-not-loaded.
	if dev, ok := kernelDev(m.Dev); ok && m.Inode != 0 {
		u.registerInode(dev, m.Inode, idx, int64(m.Start-m.Offset-bias))
	}
	return idx, bias, true
}

// statDev is st's device as the kernel's s_dev (major << 20 | minor), as
// kernelDev gives a mapping's.
func statDev(st *unix.Stat_t) uint64 {
	return uint64(unix.Major(st.Dev))<<20 | uint64(unix.Minor(st.Dev))
}

// kernelDev turns the device /proc/PID/maps prints ("fd:01", major and
// minor in hex) into the kernel's s_dev (major << 20 | minor).
func kernelDev(s string) (uint64, bool) {
	maj, min, ok := strings.Cut(s, ":")
	if !ok {
		return 0, false
	}
	a, err1 := strconv.ParseUint(maj, 16, 32)
	b, err2 := strconv.ParseUint(min, 16, 32)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return a<<20 | b, true
}

// registerInode lets the program find a loaded file by device and inode,
// for a mapping of it not described yet (bpf_find_vma): a library the
// dynamic loader just mapped, a new process.
func (u *Unwinder) registerInode(dev, ino uint64, file uint32, delta int64) {
	k := struct{ Dev, Ino uint64 }{dev, ino}
	v := struct {
		File  uint32
		_     uint32
		Delta int64
	}{File: file, Delta: delta}
	// Every process mapping libc says the same: told once.
	u.mu.Lock()
	was, told := u.inodes[k]
	if told && was.file == file && was.delta == delta {
		u.mu.Unlock()
		return
	}
	u.inodes[k] = inodeVal{file, delta}
	u.mu.Unlock()
	if err := u.objs.Inodes.Update(k, v, ebpf.UpdateAny); err != nil {
		u.note("the BPF inodes map is full")
		u.mu.Lock()
		delete(u.inodes, k)
		u.mu.Unlock()
	}
}

// inodeVal is what the inodes map was told about a file.
type inodeVal struct {
	file  uint32
	delta int64
}

func fileKey(mod *target.Module, m *target.Mapping) string {
	if id := mod.File.BuildIDHex(); id != "" {
		return "build-id:" + id
	}
	return fmt.Sprintf("file:%s:%s:%d", m.Path, m.Dev, m.Inode)
}

// loadRows compiles a module's rows into the rows map for the file with
// index idx, evicting other files' rows when there is no room (place); a
// file with more rows than the whole map keeps a count of zero, and is
// said so once.
func (u *Unwinder) loadRows(idx uint32, mod *target.Module) error {
	began := time.Now()
	defer func() {
		u.work.files.Add(1)
		u.work.loadNS.Add(int64(time.Since(began)))
	}()
	t, err := mod.Table()
	if err != nil {
		return fmt.Errorf("%s: no unwind table: %v", mod.Path, err)
	}
	total := u.pool.alloc.total
	tooBig := func(what string, n uint64) error {
		u.mu.Lock()
		u.pool.state(idx, mod).tooBig = true
		u.mu.Unlock()
		return fmt.Errorf("%s: %s%d rows do not fit in the BPF rows map (%d rows): its stacks end file-not-loaded", mod.Path, what, n, total)
	}
	// A table far larger than the whole map is not compiled to find
	// that out (a compiler's million rows took 150 ms and 50 MB).
	if n := uint64(t.Stats().Rows); n > 2*uint64(total) {
		return tooBig("about ", n)
	}
	rows := CompileRows(t, Marks(mod))
	if len(rows) == 0 {
		return nil
	}
	if uint64(len(rows)) > uint64(total) {
		return tooBig("", uint64(len(rows)))
	}
	// Packed before room is made: a file the rules table cannot take
	// evicts nothing.
	packed, base, err := u.rules.pack(rows, u.objs.Rules)
	if err != nil {
		return fmt.Errorf("%s: %v", mod.Path, err)
	}
	first, err := u.place(idx, uint32(len(rows)))
	if err == errNoRoomYet {
		return nil
	}
	if err != nil {
		return err
	}
	keys := make([]uint32, len(rows))
	for i := range keys {
		keys[i] = first + uint32(i)
	}
	if _, berr := u.objs.Rows.BatchUpdate(keys, packed, nil); berr != nil {
		for i := range packed {
			if berr = u.objs.Rows.Update(keys[i], &packed[i], ebpf.UpdateAny); berr != nil {
				u.written(idx, false)
				return fmt.Errorf("%s: writing its rows: %v", mod.Path, berr)
			}
		}
	}
	if gf, ok := goInfo(mod); ok {
		if err := u.objs.Gofiles.Update(idx, gf, ebpf.UpdateAny); err != nil {
			u.note(fmt.Sprintf("Go stack switches of %s are not crossed: %v", mod.Path, err))
		}
	}
	// The count last: the program uses the rows once it sees it. Stamped
	// as used now, so that it is not the next file evicted.
	fr := fileRows{first, uint32(len(rows)), base, stampNow()}
	err = u.objs.Files.Update(idx, fr, ebpf.UpdateAny)
	u.written(idx, err == nil)
	return err
}

var (
	vdsoOnce sync.Once
	vdsoMod  *target.Module
)

// vdso returns the kernel's vDSO (this process's, the same image every
// process maps).
func (u *Unwinder) vdso() *target.Module {
	vdsoOnce.Do(func() {
		maps, err := procmaps.Read(os.Getpid())
		if err != nil {
			return
		}
		for _, m := range maps {
			if m.Path == target.VDSOPath && m.End > m.Start && m.End-m.Start <= 1<<20 {
				f, err := os.Open("/proc/self/mem")
				if err != nil {
					return
				}
				img := make([]byte, m.End-m.Start)
				_, err = f.ReadAt(img, int64(m.Start))
				f.Close()
				if err == nil {
					vdsoMod, _ = target.VDSOImage(img, u.opt.Objects)
				}
			}
		}
	})
	return vdsoMod
}

// libDirs are where Prewarm looks for the libraries a program needs.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// Prewarm loads the rows of a program about to start and of the shared
// libraries it names (DT_NEEDED, found in the standard directories), so
// that its first samples, taken before the dynamic loader has mapped them
// and the program asked for them, are walked.
func (u *Unwinder) Prewarm(program string) {
	path, err := exec.LookPath(program)
	if err != nil {
		return
	}
	paths := []string{path}
	if f, err := elf.Open(path); err == nil {
		libs, _ := f.ImportedLibraries()
		if interp := f.Section(".interp"); interp != nil {
			if b, err := interp.Data(); err == nil {
				paths = append(paths, strings.TrimRight(string(b), "\x00"))
			}
		}
		f.Close()
		for _, lib := range libs {
			for _, d := range libDirs {
				if p := filepath.Join(d, lib); fileExists(p) {
					paths = append(paths, p)
					break
				}
			}
		}
	}
	for _, p := range paths {
		mod := u.opt.Objects.Module(p)
		if mod.File == nil {
			continue
		}
		idx, ok := u.fileIndex(fileKey(mod, &target.Mapping{Path: p}), mod, true)
		if !ok {
			continue
		}
		var st unix.Stat_t
		delta, dok := execDelta(p)
		if dok && unix.Stat(p, &st) == nil {
			u.registerInode(statDev(&st), st.Ino, idx, delta)
		}
	}
}

// execDelta returns p_vaddr - p_offset of an ELF file's executable
// segment.
func execDelta(path string) (int64, bool) {
	f, err := elf.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			return int64(p.Vaddr - p.Off), true
		}
	}
	return 0, false
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
