package sframe_test

import (
	"debug/elf"
	"fmt"
	"log"

	"github.com/rewindstack/rewind/sframe"
)

// Parsing an object's .sframe section and looking up the unwind rule at
// one address, as an unwinder does for each frame.
func ExampleParse() {
	f, err := elf.Open("testdata/v3/libfuncs-x86_64.so")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	s := f.Section(".sframe")
	data, err := s.Data()
	if err != nil {
		log.Fatal(err)
	}
	sec, err := sframe.Parse(data, s.Addr, "libfuncs-x86_64.so .sframe")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("version %d, %d functions\n", sec.Header.Version, sec.NumFDEs())
	for _, pc := range []uint64{0x380, 0x384} {
		row, ok := sec.Lookup(pc)
		fmt.Printf("%#x: %v %v\n", pc, row, ok)
	}
	// Output:
	// version 3, 7 functions
	// 0x380: cfa=sp+8 ra=[cfa-8] fp=same true
	// 0x384: cfa=sp+16 ra=[cfa-8] fp=same true
}
