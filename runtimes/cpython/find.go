package cpython

import (
	"debug/elf"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rewindstack/rewind/runtimes"
	"github.com/rewindstack/rewind/target"
)

// Runtime is a CPython interpreter found in a process or core.
type Runtime struct {
	// Version is "3.11", "3.12", "3.13".
	Version string
	// Path is the object that holds _PyRuntime: the executable or
	// libpython.
	Path string
	// Addr is _PyRuntime's address in the process.
	Addr uint64

	l    layout
	bias uint64 // Path's load bias in the process
}

// pyName matches the interpreter's file names (python3.11, python3.13t,
// libpython3.12.so.1.0, libpython3.14t.so) as the regular expression
// ^(lib)?python3\.(\d+)(t?)(d?)(\.so.*)?$ does, returning the same
// submatches (the whole name, "lib", the minor version, "t", "d", the
// ".so" suffix; nil when it does not match). It is written out rather than
// compiled: compiling a regular expression at start-up cost every rewind
// command 0.5 to 1 ms on a VM where first touches of memory are dear.
func pyName(name string) []string {
	s := name
	lib := ""
	if rest, ok := strings.CutPrefix(s, "lib"); ok {
		lib, s = "lib", rest
	}
	s, ok := strings.CutPrefix(s, "python3.")
	if !ok {
		return nil
	}
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	if n == 0 {
		return nil
	}
	minor, s := s[:n], s[n:]
	t, d := "", ""
	if rest, ok := strings.CutPrefix(s, "t"); ok {
		t, s = "t", rest
	}
	if rest, ok := strings.CutPrefix(s, "d"); ok {
		d, s = "d", rest
	}
	// "." matches anything but a newline.
	if s != "" && (!strings.HasPrefix(s, ".so") || strings.Contains(s, "\n")) {
		return nil
	}
	return []string{name, lib, minor, t, d, s}
}

// Find looks for CPython among the mappings of a process or core: the
// object named python3.N or libpython3.N.so that defines _PyRuntime.
// file gives the path to open for a mapping (the live process's file
// through /proc/PID/root, a core's as the locator found it; "" when
// there is none). It returns nil and no error when no CPython is
// mapped, an *UnsupportedError when its version or build is unknown
// here, and an error naming the file when the runtime cannot be found
// or read. mem is read for 3.13's _Py_DebugOffsets.
func Find(maps []target.Mapping, mem target.Memory, file func(*target.Mapping) string) (*Runtime, error) {
	var firstErr error
	seen := map[string]bool{}
	// libpython first: an executable linked against it holds no runtime.
	for _, wantLib := range []bool{true, false} {
		for i := range maps {
			m := &maps[i]
			sm := pyName(filepath.Base(m.Path))
			if sm == nil || (sm[1] == "lib") != wantLib || seen[m.Path] {
				continue
			}
			seen[m.Path] = true
			rt, err := open(maps, m, sm, mem, file(m))
			if rt != nil || err != nil {
				if _, ok := err.(*UnsupportedError); ok || err == nil {
					return rt, err
				}
				if firstErr == nil {
					firstErr = err
				}
			}
		}
	}
	return nil, firstErr
}

// open reads the runtime of the object mapped at m (sm: its name's
// parts) from path; nil, nil when it defines no _PyRuntime.
func open(maps []target.Mapping, m *target.Mapping, sm []string, mem target.Memory, path string) (*Runtime, error) {
	minor, _ := strconv.Atoi(sm[2])
	version := "3." + sm[2]
	if path == "" {
		return nil, fmt.Errorf("%s: not readable", m.Path)
	}
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	vaddr, ok := runtimeSymbol(f)
	if !ok {
		return nil, nil
	}
	bias, ok := runtimes.LoadBias(f, maps, m.Path)
	if !ok {
		return nil, fmt.Errorf("%s: no mapping of its first loadable segment", path)
	}
	switch {
	case sm[3] == "t":
		return nil, &UnsupportedError{Version: version + "t", Why: "free-threaded builds are not supported"}
	case minor < 11:
		return nil, &UnsupportedError{Version: version, Why: "only 3.11 and later are read"}
	}
	rt := &Runtime{Version: version, Path: path, Addr: vaddr + bias, bias: bias}
	switch minor {
	case 11:
		rt.l = layout311
	case 12:
		rt.l = layout312
	default:
		b := make([]byte, debugOffsetsSize)
		if err := mem.ReadMemory(rt.Addr, b); err != nil {
			return nil, fmt.Errorf("%s: _PyRuntime at %#x: %w", path, rt.Addr, err)
		}
		if rt.l, err = fromDebugOffsets(b, minor); err != nil {
			if _, ok := err.(*UnsupportedError); ok {
				return nil, err
			}
			return nil, fmt.Errorf("%s: _PyRuntime at %#x: %w", path, rt.Addr, err)
		}
	}
	return rt, nil
}

// runtimeSymbol is _PyRuntime's address in f: the .PyRuntime section
// that holds it alone from 3.12 on (found without reading a symbol
// table), else its symbol (the dynamic table first: stripped
// interpreters keep it).
func runtimeSymbol(f *elf.File) (uint64, bool) {
	if s := f.Section(".PyRuntime"); s != nil && s.Addr != 0 {
		return s.Addr, true
	}
	for _, syms := range []func() ([]elf.Symbol, error){f.DynamicSymbols, f.Symbols} {
		list, _ := syms()
		for _, s := range list {
			if s.Name == "_PyRuntime" && s.Value != 0 {
				return s.Value, true
			}
		}
	}
	return 0, false
}
