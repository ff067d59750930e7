package goruntime

import (
	"debug/elf"
	"fmt"

	"github.com/rewindstack/rewind/internal/elfdata"
	"github.com/rewindstack/rewind/internal/fileerr"
	"github.com/rewindstack/rewind/target"
)

// Table is a Go executable's pcln table as an unwinder reads it: the
// function that holds an address, its stack-pointer delta there (the pcsp
// table the runtime's own traceback uses, funcspdelta), its flags and its
// funcID. It needs neither a symbol table nor DWARF, so it describes
// binaries built with -ldflags='-s -w' as well as others.
//
// Every read is bounds-checked: a malformed table makes Func fail and
// SPDelta return an error naming the offset, never panic.
type Table struct {
	t    *goTable
	path string
}

// FuncFlag is the runtime's abi.FuncFlag of a function.
type FuncFlag uint8

// Function flags (internal/abi/symtab.go).
const (
	// FlagTopFrame: the function is the top of its stack (goexit,
	// mstart, rt0_go); Go's traceback ends there.
	FlagTopFrame FuncFlag = 1 << iota
	// FlagSPWrite: the function writes the stack pointer in a way the
	// pcsp table cannot describe (stack switches such as gogo and
	// systemstack).
	FlagSPWrite
	// FlagAsm: the function is written in assembly.
	FlagAsm
)

// Func is one function of a Table.
type Func struct {
	// Entry and End bound the function's code, in the object's own
	// addresses (before any load bias).
	Entry, End uint64
	// FuncID is the runtime's abi.FuncID (0 for an ordinary function);
	// its values change between Go versions.
	FuncID uint8
	// Flag are the function's flags.
	Flag FuncFlag

	pcsp    uint32
	nameOff int32
	recOff  uint64 // the _func record's offset in the table, for errors
}

var goTableKey = target.NewMemoKey()

// TableOf returns the pcln table of mod's object, read once per module
// (Module.Memo); nil when the object is not a Go program or its table
// cannot be read.
func TableOf(mod *target.Module) *Table {
	if mod == nil || mod.File == nil || !mod.File.Go {
		return nil
	}
	g, _ := mod.Memo(goTableKey, openModuleGoTable).(*Table)
	return g
}

func openModuleGoTable(mod *target.Module) any {
	ef, err := elfdata.Open(mod.File.Path)
	if err != nil {
		return (*Table)(nil)
	}
	defer ef.Close()
	g, err := OpenTable(ef.ELF, mod.File.Path)
	if err != nil {
		return (*Table)(nil)
	}
	return g
}

// OpenTable reads the pcln table of ef, the object at path (which errors
// name): its .gopclntab section, or the range runtime.pclntab to
// runtime.epclntab of its symbol table. A file without one, or with a
// malformed one, is an error, never a panic.
func OpenTable(ef *elf.File, path string) (*Table, error) {
	var gt *goTable
	if err := elfdata.Protect(func() error {
		var err error
		gt, err = openGoTable(ef)
		return err
	}); err != nil {
		return nil, err
	}
	return &Table{t: gt, path: path}, nil
}

// Frames resolves vaddr, an address of the object, to its functions,
// innermost first: one Frame per inlined call, then the physical
// function.
func (g *Table) Frames(vaddr uint64) ([]Frame, bool) { return g.t.lookup(vaddr) }

// Func returns the function holding vaddr, an address of the object.
func (g *Table) Func(vaddr uint64) (Func, bool) {
	f, ok := g.t.find(vaddr)
	if !ok {
		return Func{}, false
	}
	return Func{
		Entry: f.entry, End: f.end,
		FuncID:  f.rec[goFuncIDOffset],
		Flag:    FuncFlag(f.rec[goFuncFlagOffset]),
		pcsp:    g.t.bo.Uint32(f.rec[goFuncPCSPOffset:]),
		nameOff: f.nameOff,
		recOff:  g.t.functabOff + uint64(len(g.t.functab)-len(f.rec)),
	}, true
}

// Name returns f's name as the pcln table spells it (assembly functions
// without the ".abi0" of the symbol table).
func (g *Table) Name(f *Func) string { return g.t.funcName(f.nameOff) }

// SPDelta returns how far the stack pointer at vaddr in f lies below its
// value at f's entry (the runtime's funcspdelta): on amd64 the caller's
// stack pointer is SP+delta+8 (the return address), on arm64 SP+delta. A
// function without a pcsp table (external code) or an address its table
// does not cover is an error, which names the table's offset.
func (g *Table) SPDelta(f *Func, vaddr uint64) (int32, error) {
	if vaddr < f.Entry || vaddr >= f.End {
		return 0, g.errorf(f.recOff, "address %#x is outside the function [%#x, %#x)", vaddr, f.Entry, f.End)
	}
	if f.pcsp == 0 {
		return 0, g.errorf(f.recOff, "function at %#x has no pcsp table", f.Entry)
	}
	if uint64(f.pcsp) >= uint64(len(g.t.pctab)) {
		return 0, g.errorf(f.recOff+goFuncPCSPOffset, "pcsp table offset %#x of the function at %#x is beyond the pc-value tables (%#x bytes)", f.pcsp, f.Entry, len(g.t.pctab))
	}
	gf := goFunc{entry: f.Entry, end: f.End}
	v, bad, msg := g.t.pcvalueAt(&gf, f.pcsp, vaddr)
	if msg != "" {
		return 0, g.errorf(g.t.pctabOff+bad, "pcsp table of the function at %#x, at %#x: %s", f.Entry, vaddr, msg)
	}
	// A delta may be negative: syscall.rawVforkSyscall pops its own
	// return address.
	if v&3 != 0 {
		return 0, g.errorf(g.t.pctabOff+uint64(f.pcsp), "pcsp table of the function at %#x: delta %d at %#x is not a stack slot", f.Entry, v, vaddr)
	}
	return v, nil
}

func (g *Table) errorf(off uint64, format string, args ...any) error {
	return &fileerr.FormatError{Pkg: "goruntime", File: g.path, Section: ".gopclntab", Offset: off, Msg: fmt.Sprintf(format, args...)}
}

// Extents returns the extent [entry, end) of each of the named functions
// the table has (names as the table spells them), in one pass over its
// functions.
func (g *Table) Extents(names []string) map[string][2]uint64 {
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	out := map[string][2]uint64{}
	g.each(func(f *Func) bool {
		if name := g.Name(f); want[name] {
			if _, dup := out[name]; !dup {
				out[name] = [2]uint64{f.Entry, f.End}
			}
		}
		return len(out) < len(want)
	})
	return out
}

// TopFrames returns the extents of the functions flagged as the top of a
// stack (FlagTopFrame).
func (g *Table) TopFrames() [][2]uint64 {
	var out [][2]uint64
	g.each(func(f *Func) bool {
		if f.Flag&FlagTopFrame != 0 {
			out = append(out, [2]uint64{f.Entry, f.End})
		}
		return true
	})
	return out
}

// each calls fn for every function of the table, in address order, until
// fn returns false.
func (g *Table) each(fn func(*Func) bool) {
	t := g.t
	for i := 0; i < t.nfunc; i++ {
		e, ok := t.u32(t.functab, i*8)
		if !ok {
			return
		}
		f, ok := g.Func(t.text + uint64(e))
		if ok && !fn(&f) {
			return
		}
	}
}
