package unwind

import (
	"debug/elf"
	"runtime"
	"slices"
	"testing"

	"github.com/rewindstack/rewind/corefile"
	"github.com/rewindstack/rewind/internal/testutil/perftest"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
)

// TestNoReturnCallBeforeEntry: a function that ends with a call to a
// function that never returns pushes, as its return address, the first
// byte of whatever follows it, here _start (gcc lays main out just before
// _start, so a main ending in exit(0) does this). That is not a return
// address a context-switch library planted, as __start_context's is: the
// walk goes on to _start and ends there. The core is the kernel's dump of
// testdata/planted/root.S.
func TestNoReturnCallBeforeEntry(t *testing.T) {
	c, err := corefile.Open("testdata/planted/root.core")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tg, err := c.Target(nil, "testdata/planted/root")
	if err != nil {
		t.Fatal(err)
	}
	sym := &symbolize.Symbolizer{}
	for _, name := range []string{"auto", "dwarf"} {
		u, _ := ByName(name)
		st := u.Walk(tg.Contexts[0].Regs, tg.Mem, tg.Space)
		var got []string
		for _, f := range st.Frames {
			fn := ""
			if locs := sym.Frame(f.Map, f.PC, f.Exact); len(locs) > 0 {
				fn = locs[len(locs)-1].Function
			}
			got = append(got, fn)
		}
		// _start's CFI marks its return address undefined, as glibc's
		// does.
		if want := []string{"crash", "middle", "_start"}; !slices.Equal(got, want) || st.End != EndRAUndefined {
			t.Errorf("%s: %q (end %s %s), want %q ending at _start's undefined return address", name, got, st.End, st.Detail, want)
		}
	}
}

// TestGoEntryPoint: a Go program sampled at its ELF entry point (perf
// records the first instructions of every program it starts) is in
// _rt0_amd64_linux, which jumps on to runtime.rt0_go; the word at the stack
// pointer is argc, not a return address, although the CFI Go's linker
// writes (.debug_frame) says that a return address is there. The walk is
// that one frame and ends as outermost, rather than taking argc (3) for a
// caller.
func TestGoEntryPoint(t *testing.T) {
	if runtime.GOARCH != "amd64" || runtime.GOOS != "linux" {
		t.Skipf("the register set built here is amd64's; this is %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	ef, maps := goText(t)
	space := target.NewAddressSpace(maps, &target.Objects{})
	s := newFakeStack(0x7000, 0x1000)
	s.put(0x7f00, 3)      // argc
	s.put(0x7f08, 0x7f80) // argv[0]
	for _, name := range []string{"auto", "dwarf", "fp"} {
		u, _ := ByName(name)
		st := u.Walk(amd64Regs(ef.Entry, 0x7f00, 0), s.mem(), space)
		if got := pcs(st); !slices.Equal(got, []uint64{ef.Entry}) || st.End != EndOutermost {
			t.Errorf("%s: frames %#x, end %s (%s); want the entry point %#x alone, outermost", name, got, st.End, st.Detail, ef.Entry)
		}
	}
}

// goText builds the Go test program and returns it, opened, with the
// mapping of its one text segment (closed when t ends).
func goText(t *testing.T) (*elf.File, []target.Mapping) {
	t.Helper()
	exe := perftest.BuildGo(t)
	ef, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ef.Close() })
	var maps []target.Mapping
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			start := p.Vaddr &^ 0xfff
			maps = append(maps, target.Mapping{Start: start, End: p.Vaddr + p.Memsz, Offset: p.Off - (p.Vaddr - start), Path: exe, Perms: "r-xp"})
		}
	}
	if ef.Type != elf.ET_EXEC || len(maps) != 1 {
		t.Fatalf("go build wrote an executable of type %v with %d text segments, want an internally linked one of one", ef.Type, len(maps))
	}
	return ef, maps
}
