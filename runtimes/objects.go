package runtimes

import (
	"debug/elf"
	"fmt"
	"os"
	"syscall"

	"github.com/rewindstack/rewind/cfi"
	"github.com/rewindstack/rewind/target"
)

// LoadBias is the load bias of the object f mapped from path: from the
// mapping of its first PT_LOAD segment's file offset, else the bias the
// target computed for the object's code (a core's notes cut short); ok
// is false when neither is known.
func LoadBias(f *elf.File, maps []target.Mapping, path string) (bias uint64, ok bool) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		for i := range maps {
			m := &maps[i]
			if m.Path == path && m.Offset <= p.Off && p.Off < m.Offset+(m.End-m.Start) {
				// The byte at file offset p.Off is at p.Vaddr in the object.
				return m.Start + (p.Off - m.Offset) - p.Vaddr, true
			}
		}
		break
	}
	for i := range maps {
		if m := &maps[i]; m.Path == path && m.Module != nil {
			return m.Bias, true
		}
	}
	return 0, false
}

// ProcessFile is a runtime's way to open the objects mapped in live
// process pid, found as package
// live finds a mapped object: /proc/PID/map_files (the very file that
// is mapped), else the path in the process's root directory
// (/proc/PID/root: a process in a container), else the path as this
// process sees it (a chrooted process's maps show host paths); a file
// found by path whose inode is not the mapping's is skipped.
func ProcessFile(pid int) func(*target.Mapping) string {
	return func(m *target.Mapping) string {
		if m.Path == "" || m.Path[0] != '/' {
			return ""
		}
		mf := fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.Start, m.End)
		if _, err := os.Stat(mf); err == nil {
			return mf
		}
		for _, cand := range []string{fmt.Sprintf("/proc/%d/root%s", pid, m.Path), m.Path} {
			st, err := os.Stat(cand)
			if err != nil {
				continue
			}
			if sys, ok := st.Sys().(*syscall.Stat_t); ok && m.Inode != 0 && sys.Ino != m.Inode {
				continue
			}
			return cand
		}
		return ""
	}
}

// CoreFiles is a runtime's way to open the objects of a core's target: the object a mapping of
// the same file was opened from (as --exe, --sysroot or debuginfod found
// it; only executable mappings have a module).
func CoreFiles(space *target.AddressSpace) func(*target.Mapping) string {
	paths := map[string]string{}
	for _, m := range space.Mappings() {
		if m.Module != nil && m.Module.File != nil {
			paths[m.Path] = m.Module.File.Path
		}
	}
	return func(m *target.Mapping) string { return paths[m.Path] }
}

// Maps returns the mappings of a target's address space.
func Maps(space *target.AddressSpace) []target.Mapping {
	var out []target.Mapping
	for _, m := range space.Mappings() {
		out = append(out, *m)
	}
	return out
}

// FileBytes reads up to n bytes at link-time address vaddr of f, from
// the loadable segment holding vaddr (fewer where the segment's file
// bytes end); nil when no segment holds it.
func FileBytes(f *elf.File, vaddr, n uint64) []byte {
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || vaddr < p.Vaddr || vaddr >= p.Vaddr+p.Filesz {
			continue
		}
		b := make([]byte, min(n, p.Vaddr+p.Filesz-vaddr))
		if _, err := p.ReadAt(b, int64(vaddr-p.Vaddr)); err != nil {
			return nil
		}
		return b
	}
	return nil
}

// maxEhFrame bounds the .eh_frame EhFrame parses (libpython's is about
// 1 MiB, a large C++ program's tens).
const maxEhFrame = 64 << 20

// EhFrame parses f's .eh_frame (x86-64 and other 64-bit objects): its
// FDEs, for a runtime that finds its interpreter's code by the extent of
// an unwind entry where no symbol bounds it; nil when f has none, or
// one larger than maxEhFrame. A malformed section gives the FDEs before
// the bad entry.
func EhFrame(f *elf.File) []*cfi.FDE {
	eh := f.Section(".eh_frame")
	if eh == nil || eh.Size > maxEhFrame || f.Class != elf.ELFCLASS64 {
		return nil
	}
	data, err := eh.Data()
	if err != nil {
		return nil
	}
	var textAddr uint64
	if text := f.Section(".text"); text != nil {
		textAddr = text.Addr
	}
	fdes, _ := cfi.Parse(&cfi.Section{Name: ".eh_frame", Kind: cfi.EhFrame, Data: data, Addr: eh.Addr,
		ByteOrder: f.ByteOrder, PtrSize: 8, TextAddr: textAddr})
	return fdes
}
