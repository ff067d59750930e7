package bpfunwind

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/rewindstack/rewind/internal/procmaps"
	"github.com/rewindstack/rewind/target"
)

// Describe reads a process's executable mappings from /proc, loads the
// rows of files not loaded yet and tells the program the process's
// mappings. A process that exited is forgotten by the program (its
// mappings stay known here, for symbolizing its stacks).
func (u *Unwinder) Describe(pid int) error {
	maps, err := procmaps.Read(pid)
	if err != nil {
		u.objs.Procs.Delete(uint32(pid))
		return err
	}
	space := target.NewAddressSpace(maps, u.opt.Objects)
	var p proc
	var kept []target.Mapping
	for _, m := range space.Mappings() {
		if !m.Executable() {
			continue
		}
		kept = append(kept, *m)
		if p.N == MaxMaps {
			u.note(fmt.Sprintf("process %d has more than %d executable mappings", pid, MaxMaps))
			break
		}
		file, bias, ok := u.fileOf(m)
		if !ok {
			continue
		}
		p.Maps[p.N] = mapping{Start: m.Start, End: m.End, Bias: bias, File: file}
		p.N++
	}
	sort.Slice(p.Maps[:p.N], func(i, j int) bool { return p.Maps[i].Start < p.Maps[j].Start })
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
	u.mu.Unlock()
	if err := u.objs.Procs.Update(uint32(pid), &p, ebpf.UpdateAny); err != nil {
		u.note("the BPF process map is full")
		return err
	}
	u.describePython(pid, maps)
	return nil
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
// files map, loading its rows on first use (a file whose rows cannot be
// loaded is noted for the period line).
func (u *Unwinder) fileIndex(key string, mod *target.Module) uint32 {
	u.mu.Lock()
	idx, ok := u.files[key]
	u.mu.Unlock()
	if !ok {
		var err error
		if idx, err = u.loadRows(key, mod); err != nil {
			u.note(err.Error())
		}
	}
	return idx
}

// fileOf returns the index of a mapping's file in the program's files map,
// loading its rows on first use, and the mapping's load bias.
func (u *Unwinder) fileOf(m *target.Mapping) (uint32, uint64, bool) {
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
	idx := u.fileIndex(fileKey(mod, m), mod)
	// A file without rows: its stacks end file-not-loaded.
	if dev, ok := kernelDev(m.Dev); ok && m.Inode != 0 {
		u.registerInode(dev, m.Inode, idx, int64(m.Start-m.Offset-bias))
	}
	return idx, bias, true
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
	if err := u.objs.Inodes.Update(k, v, ebpf.UpdateAny); err != nil {
		u.note("the BPF inodes map is full")
	}
}

func fileKey(mod *target.Module, m *target.Mapping) string {
	if id := mod.File.BuildIDHex(); id != "" {
		return "build-id:" + id
	}
	return fmt.Sprintf("file:%s:%s:%d", m.Path, m.Dev, m.Inode)
}

// loadRows compiles a module's rows into the rows map and gives the file
// an index; a file whose rows do not fit gets an index with no rows.
func (u *Unwinder) loadRows(key string, mod *target.Module) (uint32, error) {
	t, err := mod.Table()
	var rows []Row
	if err == nil {
		rows = CompileRows(t, Marks(mod))
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if idx, ok := u.files[key]; ok {
		return idx, nil
	}
	idx := uint32(len(u.files))
	if idx >= MaxFiles {
		return 0, fmt.Errorf("the BPF files map is full (%d files): %s not loaded", MaxFiles, mod.Path)
	}
	u.files[key] = idx
	fr := struct{ First, Count uint32 }{u.nextRow, 0}
	switch {
	case err != nil:
		err = fmt.Errorf("%s: no unwind table: %v", mod.Path, err)
	case uint64(u.nextRow)+uint64(len(rows)) > uint64(min(u.opt.Sizes.Rows, MaxRows)):
		err = fmt.Errorf("%s: %d rows do not fit in the BPF rows map (%d of %d used)", mod.Path, len(rows), u.nextRow, min(u.opt.Sizes.Rows, MaxRows))
	case len(rows) > 0:
		keys := make([]uint32, len(rows))
		for i := range keys {
			keys[i] = u.nextRow + uint32(i)
		}
		if _, berr := u.objs.Rows.BatchUpdate(keys, rows, nil); berr != nil {
			for i := range rows {
				if berr = u.objs.Rows.Update(keys[i], &rows[i], ebpf.UpdateAny); berr != nil {
					break
				}
			}
			if berr != nil {
				err = fmt.Errorf("%s: writing its rows: %v", mod.Path, berr)
				break
			}
		}
		fr.Count = uint32(len(rows))
		u.nextRow += uint32(len(rows))
	}
	if uerr := u.objs.Files.Update(idx, fr, ebpf.UpdateAny); uerr != nil && err == nil {
		err = uerr
	}
	return idx, err
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
		idx := u.fileIndex(fileKey(mod, &target.Mapping{Path: p}), mod)
		var st unix.Stat_t
		delta, dok := execDelta(p)
		if dok && unix.Stat(p, &st) == nil {
			u.registerInode(uint64(unix.Major(st.Dev))<<20|uint64(unix.Minor(st.Dev)), st.Ino, idx, delta)
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
