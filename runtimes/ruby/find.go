package ruby

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/rewindstack/rewind/runtimes"
	"github.com/rewindstack/rewind/target"
)

// Runtime is a Ruby VM found in a process or core.
type Runtime struct {
	// Version is the ruby_version string ("3.1.2").
	Version string
	// Path is the object that holds the VM: libruby or the executable.
	Path string
	// VMPtr is the address of ruby_current_vm_ptr in the process.
	VMPtr uint64
	// Symbols is the address of the symbol table (ruby_global_symbols,
	// found through rb_id2str's code), 0 when it was not found: C
	// methods' names then are not read.
	Symbols uint64
	// Exec is the range of rb_vm_exec in the process (from its symbol, or where
	// the symbols hide it from the functions that call it; zero when not
	// found): the VM's entry from C, each of whose
	// native frames runs one activation of Ruby frames.
	Exec target.PCRange

	l        *layout
	lastOpID uint64 // IDs above it are serial<<idShift|scope
	idShift  uint
}

// UnsupportedError is a Ruby whose version rewind has no layout for.
type UnsupportedError struct{ Version string }

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("Ruby %s is not supported (3.0-3.4 are read): native frames only", e.Version)
}

// rubyObject reports whether a mapped file's name is one that may hold
// the VM: libruby*.so* or a ruby* executable.
func rubyObject(name string) (lib, ok bool) {
	if strings.HasPrefix(name, "libruby") && strings.Contains(name, ".so") {
		return true, true
	}
	return false, strings.HasPrefix(name, "ruby")
}

// Find looks for the Ruby VM among the mappings of a process or core:
// the object (libruby first, then a ruby executable) that defines
// ruby_current_vm_ptr. file gives the path to open for a mapping (""
// when there is none). It returns nil and no error when no Ruby is
// mapped, an *UnsupportedError for a version without a layout here, and
// an error naming the file when the VM cannot be found.
func Find(maps []target.Mapping, file func(*target.Mapping) string) (*Runtime, error) {
	var firstErr error
	seen := map[string]bool{}
	for _, wantLib := range []bool{true, false} {
		for i := range maps {
			m := &maps[i]
			lib, ok := rubyObject(filepath.Base(m.Path))
			if !ok || lib != wantLib || seen[m.Path] {
				continue
			}
			seen[m.Path] = true
			rt, err := open(maps, m, file(m))
			if rt != nil {
				return rt, nil
			}
			if _, ok := err.(*UnsupportedError); ok {
				return nil, err
			}
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	return nil, firstErr
}

// open reads the VM's symbols from the object mapped at m, opened from
// path; nil, nil when it does not define them.
func open(maps []target.Mapping, m *target.Mapping, path string) (*Runtime, error) {
	if path == "" {
		return nil, fmt.Errorf("%s: not readable", m.Path)
	}
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	syms := symbols(f, "ruby_current_vm_ptr", "ruby_version", "rb_id2str", "ruby_vm_at_exit",
		Entry, "rb_iseq_eval", "rb_iseq_eval_main")
	ver := syms["ruby_version"]
	if ver.Value == 0 {
		return nil, nil
	}
	version := fileString(f, ver.Value, 16)
	if version == "" {
		return nil, fmt.Errorf("%s: ruby_version at %#x: not readable", path, ver.Value)
	}
	l, ok := layoutFor(version)
	if !ok {
		return nil, &UnsupportedError{Version: version}
	}
	vmPtr := syms["ruby_current_vm_ptr"].Value
	if vmPtr == 0 {
		// Debian's 3.3 exports no ruby_current_vm_ptr: it is the
		// variable ruby_vm_at_exit reads first (the walk checks it).
		if at := syms["ruby_vm_at_exit"]; at.Value != 0 {
			vmPtr = ripLoad(f, at.Value, at.Size)
		}
		if vmPtr == 0 {
			return nil, fmt.Errorf("%s (Ruby %s): neither ruby_current_vm_ptr nor ruby_vm_at_exit's code finds the VM", path, version)
		}
	}
	bias, ok := runtimes.LoadBias(f, maps, m.Path)
	if !ok {
		return nil, fmt.Errorf("%s: no mapping of its first loadable segment", path)
	}
	rt := &Runtime{Version: version, Path: path, VMPtr: vmPtr + bias, l: l}
	if e := syms[Entry]; e.Value != 0 && e.Size != 0 {
		rt.Exec = target.PCRange{Lo: e.Value + bias, Hi: e.Value + bias + e.Size}
	}
	rt.lastOpID, rt.idShift = l.lastOpID, l.idScopeShift
	if syms[Entry].Value == 0 {
		if lo, hi, ok := entryRange(f, syms); ok {
			rt.Exec = target.PCRange{Lo: lo + bias, Hi: hi + bias}
		}
	}
	if id2str := syms["rb_id2str"]; id2str.Value != 0 {
		if a := symbolTable(f, id2str.Value, id2str.Size); a != 0 {
			rt.Symbols = a + bias
		}
		idSerial(f, id2str.Value, id2str.Size, &rt.lastOpID, &rt.idShift)
	}
	return rt, nil
}

// idSerial reads, from rb_id2str's code, how it turns an ID into its
// serial: the last operator ID it compares the ID with (cmp
// $imm,%rdi), and the shift of the others (shr $imm,%rax), which
// depend on the parser's tokens and the build; lastOp and shift keep
// the layout's values when the code does not say.
func idSerial(f *elf.File, vaddr, size uint64, lastOp *uint64, shift *uint) {
	code := runtimes.FileBytes(f, vaddr, min(max(size, 16), 64))
	for i := 0; i+4 <= len(code); i++ {
		switch {
		case code[i] == 0x48 && code[i+1] == 0x81 && code[i+2] == 0xff && i+7 <= len(code):
			*lastOp = uint64(binary.LittleEndian.Uint32(code[i+3:]))
		case code[i] == 0x48 && code[i+1] == 0x83 && code[i+2] == 0xff:
			*lastOp = uint64(code[i+3])
		case code[i] == 0x48 && code[i+1] == 0xc1 && code[i+2] == 0xe8 && code[i+3] < 16:
			*shift = uint(code[i+3])
		}
	}
}

// ripLoad returns the address the first 64-bit RIP-relative load (mov
// disp32(%rip), r64) of the function at vaddr (size bytes) reads, 0
// when there is none.
func ripLoad(f *elf.File, vaddr, size uint64) uint64 {
	code := runtimes.FileBytes(f, vaddr, min(max(size, 16), 96))
	for i := 0; i+7 <= len(code); i++ {
		if code[i]&0xf8 == 0x48 && code[i+1] == 0x8b && code[i+2]&0xc7 == 0x05 {
			disp := int32(binary.LittleEndian.Uint32(code[i+3:]))
			return uint64(int64(vaddr) + int64(i) + 7 + int64(disp))
		}
	}
	return 0
}

// symbols returns the named symbols of f, from the dynamic table first
// (a stripped libruby keeps them there), then the full one.
func symbols(f *elf.File, names ...string) map[string]elf.Symbol {
	out := map[string]elf.Symbol{}
	for _, get := range []func() ([]elf.Symbol, error){f.DynamicSymbols, f.Symbols} {
		list, _ := get()
		for _, s := range list {
			for _, n := range names {
				if s.Name == n && s.Value != 0 && out[n].Value == 0 {
					out[n] = s
				}
			}
		}
	}
	return out
}

// fileString reads a NUL-terminated string of at most max bytes at
// vaddr in f; "" when it is not one of printable ASCII.
func fileString(f *elf.File, vaddr, max uint64) string {
	b := runtimes.FileBytes(f, vaddr, max)
	i := bytes.IndexByte(b, 0)
	if i <= 0 {
		return ""
	}
	for _, c := range b[:i] {
		if c < 0x20 || c > 0x7e {
			return ""
		}
	}
	return string(b[:i])
}

// symbolTable finds the address of ruby_global_symbols, which no symbol
// names in Debian's stripped libruby, from the code of rb_id2str (at
// vaddr, size bytes): it jumps to the lookup, whose first comparison is
// of the ID's serial with the table's last_id, its first member, read
// RIP-relative. 0 when the code is not of that shape. The walk checks
// what it reads there before trusting it (ids must be an Array).
func symbolTable(f *elf.File, vaddr, size uint64) uint64 {
	size = min(max(size, 16), 64)
	code := runtimes.FileBytes(f, vaddr, size)
	target := vaddr
	for i := 0; i+5 <= len(code); i++ {
		if code[i] == 0xe9 { // jmp rel32: the tail call to the lookup
			rel := int32(binary.LittleEndian.Uint32(code[i+1:]))
			target = uint64(int64(vaddr) + int64(i) + 5 + int64(rel))
			break
		}
	}
	code = runtimes.FileBytes(f, target, 160)
	for i := 0; i+6 <= len(code); i++ {
		// cmp r32, disp32(%rip) either way round: 39 or 3b, ModRM
		// mod 00, r/m 101.
		if (code[i] == 0x39 || code[i] == 0x3b) && code[i+1]&0xc7 == 0x05 {
			disp := int32(binary.LittleEndian.Uint32(code[i+2:]))
			return uint64(int64(target) + int64(i) + 6 + int64(disp))
		}
	}
	return 0
}
