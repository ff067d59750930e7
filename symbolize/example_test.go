package symbolize_test

import (
	"debug/elf"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"reflect"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
)

//go:noinline
func parked() {}

// Symbolizing a PC: the address of a function of this very program, in
// an address space made of the program's own executable segment (a Go
// test binary is not position-independent, so its load bias is zero).
func ExampleSymbolizer_Frame() {
	exe, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	f, err := elfobj.Open(exe)
	if err != nil {
		log.Fatal(err)
	}
	var maps []target.Mapping
	for _, l := range f.Loads {
		perms := "r--p"
		if l.Flags&elf.PF_X != 0 {
			perms = "r-xp"
		}
		maps = append(maps, target.Mapping{Start: l.Vaddr, End: l.Vaddr + l.Memsz, Offset: l.Offset, Path: exe, Perms: perms})
	}
	f.Close()
	space := target.NewAddressSpace(maps, &target.Objects{})

	pc := uint64(reflect.ValueOf(parked).Pointer())
	sym := &symbolize.Symbolizer{}
	loc := sym.Frame(space.Find(pc), pc, true)[0]
	fmt.Println(loc.Function, filepath.Base(loc.File), loc.Offset)
	// Output:
	// github.com/rewindstack/rewind/symbolize_test.parked example_test.go 0
}
