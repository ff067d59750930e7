// Package goruntime holds what rewind knows of the Go runtime, for every
// package that reads Go programs (the unwinder, the symbolizer, the BPF
// walk, goroutine dumps, profiles): the pcln table (Table: functions,
// their SP deltas, lines and inline trees), the functions that switch
// stacks (Switches) and those a stack ends in (RootRanges, with the C
// library's thread roots beside Go's top frames), and the runtime's data
// (Layout): where the goroutine list is (runtime.allgs, runtime.allglen),
// the offsets of the runtime.g and runtime.m fields a goroutine dump
// reads, and the wait reason strings. It takes the layout from the
// binary's DWARF types and symbol table when present, and otherwise from
// a per-version table keyed by the Go version in the binary's build
// information.
package goruntime

import (
	"debug/buildinfo"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Layout is where a goroutine dump finds the runtime's data.
type Layout struct {
	// GoVersion is the toolchain version in the build information
	// ("go1.26.8"), "" when absent.
	GoVersion string
	// Source says where the offsets came from: "dwarf" or "table goX.Y".
	Source string

	// AllGs is the address of runtime.allgs (a []*g), AllGLen of
	// runtime.allglen (a uintptr), both as linked (add the load bias).
	AllGs, AllGLen uint64

	// G holds offsets into runtime.g.
	G GOffsets
	// M holds offsets into runtime.m.
	M MOffsets
	// Labels describes the pprof label set g.labels points to.
	Labels LabelLayout
	// WaitReasons are the runtime's wait reason strings, by waitReason.
	WaitReasons []string

	// TLSG is where the runtime keeps the running goroutine's g: at
	// TLSG from the thread pointer (amd64: the fs base), when HasTLSG
	// (see tlsG). arm64 keeps it in register x28 (not set there).
	TLSG    int64
	HasTLSG bool
}

// GOffsets are byte offsets of runtime.g fields; Size is how many bytes of
// a g a dump reads (past the last field it needs).
type GOffsets struct {
	StackLo, StackHi           int
	SchedSP, SchedPC, SchedBP  int
	SchedLR                    int // g.sched.lr (arm64's morestack keeps the caller's LR there)
	SyscallSP, SyscallPC       int
	M, Status, Goid, WaitSince int
	WaitReason, LockedM        int
	ParentGoid, GoPC, StartPC  int
	Labels                     int
	Size                       int
}

// MOffsets are byte offsets of runtime.m fields.
type MOffsets struct {
	// G0 is m.g0, the thread's system goroutine (0: the first field, in
	// every release).
	G0, ProcID, CurG int
	Size             int
}

// LabelLayout says how to read a goroutine's pprof labels. From Go 1.24
// g.labels points at a struct whose first field is a slice of {key, value
// string} (runtime/pprof.labelMap, later internal/runtime/pprof/label.Set);
// before, at a map[string]string (runtime/pprof.labelMap), read as the
// runtime's hash map of that era (hmap, 8-slot buckets).
type LabelLayout struct {
	Supported bool
	// Map: labels are a map[string]string (Go 1.22, 1.23).
	Map bool
}

// ErrUnsupported: the binary is not a Go program, or its Go version has
// no offset table and no DWARF to take them from.
var ErrUnsupported = errors.New("unsupported Go binary")

// Open finds the layout of the Go executable at path.
func Open(path string) (*Layout, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Read(f, path)
}

// OpenOffsets is ReadOffsets of the Go executable at path.
func OpenOffsets(path string) (*Layout, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadOffsets(f, path)
}

// Read finds the layout of the Go executable r (named name in errors).
func Read(r io.ReaderAt, name string) (*Layout, error) { return read(r, name, true) }

// ReadOffsets finds what an unwinder needs of the layout of the Go
// executable r: the g and m offsets and TLSG. Unlike Read it does not
// need to find runtime.allgs (AllGs and AllGLen are set only when the
// symbol table names them) nor reads the wait reasons.
func ReadOffsets(r io.ReaderAt, name string) (*Layout, error) { return read(r, name, false) }

func read(r io.ReaderAt, name string, dump bool) (l *Layout, err error) {
	defer func() {
		// debug/dwarf and debug/elf are robust, but a hostile file must
		// not take the process down.
		if p := recover(); p != nil {
			l, err = nil, fmt.Errorf("%s: malformed Go binary: %v", name, p)
		}
	}()
	ef, err := elf.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if ef.Section(".go.buildinfo") == nil && ef.Section(".gopclntab") == nil {
		return nil, fmt.Errorf("%s: %w: not a Go program (no .go.buildinfo or .gopclntab section)", name, ErrUnsupported)
	}
	l = &Layout{}
	if bi, err := buildinfo.Read(readerAt{r}); err == nil {
		l.GoVersion = bi.GoVersion
	}
	syms := symbols(ef)
	if !dump {
		// An unwinder reads a few fields of g and m, at the first
		// stack switch it meets: the release's table, when the
		// program's own code agrees with it, spares it the DWARF
		// (ef.DWARF decompresses every debug section: a second for a
		// 40 MB program).
		if t, ok := tableFor(l.GoVersion); ok && codeAgrees(ef, syms, &t.g) {
			l.G, l.M, l.Labels = t.g, t.m, t.labels
			l.Source = "table " + t.version
		}
	}
	if l.Source == "" {
		if d, err := ef.DWARF(); err == nil {
			if err := l.fromDWARF(d); err == nil {
				l.Source = "dwarf"
			} else if !errors.Is(err, errNoTypes) {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	if l.Source == "" {
		t, ok := tableFor(l.GoVersion)
		if !ok {
			v := l.GoVersion
			if v == "" {
				v = "unknown Go version (no build information)"
			}
			return nil, fmt.Errorf("%s: %w: no DWARF types and no offset table for %s (tables cover %s)", name, ErrUnsupported, v, tableVersions())
		}
		l.G, l.M, l.Labels = t.g, t.m, t.labels
		l.Source = "table " + t.version
	}
	l.TLSG, l.HasTLSG = tlsG(ef, syms)
	if a, ok := syms["runtime.allgs"]; ok {
		l.AllGs = a.Value
	}
	if a, ok := syms["runtime.allglen"]; ok {
		l.AllGLen = a.Value
	}
	if !dump {
		return l, nil
	}
	if l.AllGs == 0 || l.AllGLen == 0 {
		if err := l.findAllgs(ef); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	if s, ok := syms["runtime.waitReasonStrings"]; ok && s.Size >= 16 && s.Size <= 1<<16 {
		l.WaitReasons = readStrings(ef, s.Value, int(s.Size/16))
	}
	if len(l.WaitReasons) == 0 {
		if t, ok := tableFor(l.GoVersion); ok {
			l.WaitReasons = t.waitReasons
		}
	}
	return l, nil
}

type readerAt struct{ io.ReaderAt }

func symbols(ef *elf.File) map[string]elf.Symbol {
	out := map[string]elf.Symbol{}
	ss, _ := ef.Symbols()
	for _, s := range ss {
		switch s.Name {
		case "runtime.allgs", "runtime.allglen", "runtime.waitReasonStrings", "runtime.tlsg",
			"runtime.morestack", "runtime.morestack.abi0":
			out[s.Name] = s
		}
	}
	return out
}

// readStrings reads n Go string headers at vaddr in the file's data and
// the strings they point to (static data: the linker's initial values).
func readStrings(ef *elf.File, vaddr uint64, n int) []string {
	hdr := make([]byte, 16*n)
	if !readVaddr(ef, vaddr, hdr) {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		p := binary.LittleEndian.Uint64(hdr[16*i:])
		ln := binary.LittleEndian.Uint64(hdr[16*i+8:])
		if ln == 0 {
			continue
		}
		if ln > 256 {
			return nil
		}
		b := make([]byte, ln)
		if !readVaddr(ef, p, b) {
			return nil
		}
		out[i] = string(b)
	}
	return out
}

// readVaddr fills p from the file's contents at linked address vaddr.
func readVaddr(ef *elf.File, vaddr uint64, p []byte) bool {
	for _, prog := range ef.Progs {
		if prog.Type != elf.PT_LOAD || vaddr < prog.Vaddr || vaddr+uint64(len(p)) > prog.Vaddr+prog.Filesz {
			continue
		}
		_, err := prog.ReadAt(p, int64(vaddr-prog.Vaddr))
		return err == nil
	}
	return false
}

var errNoTypes = errors.New("no runtime.g type in DWARF")

// fromDWARF takes the offsets from the DWARF types runtime.g, runtime.m,
// runtime.gobuf and runtime.stack.
func (l *Layout) fromDWARF(d *dwarf.Data) error {
	want := map[string]bool{"runtime.g": true, "runtime.m": true, "runtime.gobuf": true, "runtime.stack": true}
	types := map[string]*dwarf.StructType{}
	rd := d.Reader()
	for len(types) < len(want) {
		e, err := rd.Next()
		if err != nil {
			return err
		}
		if e == nil {
			break
		}
		if e.Tag != dwarf.TagStructType {
			if e.Tag != dwarf.TagCompileUnit {
				rd.SkipChildren()
			}
			continue
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		if !want[name] || types[name] != nil {
			rd.SkipChildren()
			continue
		}
		t, err := d.Type(e.Offset)
		if err != nil {
			return err
		}
		if st, ok := t.(*dwarf.StructType); ok {
			types[name] = st
		}
		rd.SkipChildren()
	}
	g, m := types["runtime.g"], types["runtime.m"]
	if g == nil || m == nil {
		return errNoTypes
	}
	var missing []string
	off := func(st *dwarf.StructType, path string) int {
		o, ok := fieldOffset(st, path)
		if !ok {
			missing = append(missing, st.StructName+"."+path)
		}
		return o
	}
	l.G = GOffsets{
		StackLo: off(g, "stack.lo"), StackHi: off(g, "stack.hi"),
		SchedSP: off(g, "sched.sp"), SchedPC: off(g, "sched.pc"), SchedBP: off(g, "sched.bp"), SchedLR: off(g, "sched.lr"),
		SyscallSP: off(g, "syscallsp"), SyscallPC: off(g, "syscallpc"),
		M: off(g, "m"), Status: off(g, "atomicstatus"), Goid: off(g, "goid"),
		WaitSince: off(g, "waitsince"), WaitReason: off(g, "waitreason"), LockedM: off(g, "lockedm"),
		ParentGoid: off(g, "parentGoid"), GoPC: off(g, "gopc"), StartPC: off(g, "startpc"),
		Labels: off(g, "labels"), Size: int(g.ByteSize),
	}
	l.M = MOffsets{G0: off(m, "g0"), ProcID: off(m, "procid"), CurG: off(m, "curg"), Size: int(m.ByteSize)}
	if len(missing) > 0 {
		return fmt.Errorf("DWARF types lack %s", strings.Join(missing, ", "))
	}
	// The label layout follows the version (the types are in DWARF only
	// when the program uses runtime/pprof).
	mm := majorMinor(l.GoVersion)
	l.Labels = LabelLayout{Supported: mm != "", Map: mm != "" && versionLess(mm, "go1.24")}
	return nil
}

// versionLess compares "go1.N" strings numerically.
func versionLess(a, b string) bool {
	na, _ := strconv.Atoi(strings.TrimPrefix(a, "go1."))
	nb, _ := strconv.Atoi(strings.TrimPrefix(b, "go1."))
	return na < nb
}

// fieldOffset resolves a dotted field path in a struct type.
func fieldOffset(st *dwarf.StructType, path string) (int, bool) {
	total := 0
	for _, name := range strings.Split(path, ".") {
		var f *dwarf.StructField
		for _, c := range st.Field {
			if c.Name == name {
				f = c
				break
			}
		}
		if f == nil {
			return 0, false
		}
		total += int(f.ByteOffset)
		next, ok := f.Type.(*dwarf.StructType)
		if !ok {
			if t, isTD := f.Type.(*dwarf.TypedefType); isTD {
				next, ok = t.Type.(*dwarf.StructType)
			}
		}
		st = next
		if st == nil && name != path[strings.LastIndexByte(path, '.')+1:] {
			return 0, false
		}
	}
	return total, true
}
