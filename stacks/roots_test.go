package stacks_test

import (
	"encoding/binary"
	"testing"

	"github.com/rewindstack/rewind/corefile"
	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/stacks"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// TestThreadStoppedInClone3: a new thread stopped in __clone3 right after
// the system call (where glibc ends the FDE on purpose, so no CFI covers
// it) still holds its parent's frame pointer. Every method must end the
// walk at __clone3, the thread's root, instead of following that frame
// pointer into another thread's frames.
func TestThreadStoppedInClone3(t *testing.T) {
	exe := fixture.Build(t, "threads", fixture.Variants[2])
	proc := fixture.Start(t, exe)
	snap, err := live.Capture(proc.PID, live.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tg := snap.Target(nil, nil)
	sym := &symbolize.Symbolizer{}
	var libc *target.Mapping
	var start, end uint64
	for _, m := range tg.Space.Mappings() {
		if m.Module == nil || m.Module.File == nil || !m.Executable() {
			continue
		}
		if f := sym.SymbolFile(m.Module); f != nil {
			if lo, hi, ok := f.SymbolExtent("__clone3"); ok {
				libc, start, end = m, lo, hi
			}
		}
	}
	if libc == nil {
		t.Skip("libc has no __clone3 symbol here (install libc6-dbg for glibc's local symbols)")
	}
	tab, err := libc.Module.Table()
	if err != nil {
		t.Fatal(err)
	}
	var pc uint64
	for a := start; a < end; a++ {
		if _, ok := tab.Lookup(a); !ok {
			pc = a + libc.Bias
			break
		}
	}
	if pc == 0 {
		t.Skip("every byte of this libc's __clone3 has CFI")
	}
	// A worker thread's registers, moved to the uncovered PC: its frame
	// pointer still leads to real frame records.
	var ctx target.Context
	for _, c := range tg.Contexts {
		if c.TID != proc.PID {
			ctx = c
		}
	}
	ctx.Regs.Set(regs.AMD64RIP, pc)
	if fp, ok := ctx.Regs.Get(regs.AMD64RBP); !ok || fp == 0 {
		t.Skip("the worker thread has no frame pointer to mislead the walk")
	}
	for _, name := range unwind.MethodNames {
		u, _ := unwind.ByName(name)
		st := u.Walk(ctx.Regs, tg.Mem, tg.Space)
		th := stacks.Symbolize(ctx.TID, "", &st, sym)
		if len(st.Frames) != 1 || st.End != unwind.EndOutermost || th.Frames[0].Function != "clone3" {
			t.Errorf("%s: %d frames (end %s %s), want clone3 (perf's name for __clone3) alone, ending as outermost: %+v", name, len(st.Frames), st.End, st.Detail, th.Frames)
		}
	}
}

// arm64Prog aborts three calls deep, so its core holds a complete stack
// from _start down.
const arm64Prog = `#include <stdlib.h>
__attribute__((noinline)) void leaf(int n) { if (n == 0) abort(); leaf(n - 1); __asm__ volatile(""); }
int main(void) { leaf(3); return 0; }
`

// garbageAboveStart is memory in which the frame record that ends the
// frame-pointer chain at _start (saved frame pointer 0) instead points at
// one more, plausible record: a return address into main. This is what
// stacks look like when nothing cleared the frame pointer before _start.
type garbageAboveStart struct {
	target.Memory
	start, end uint64 // _start's extent
	ra         uint64 // the plausible return address
	fake       map[uint64]bool
}

func (g *garbageAboveStart) ReadMemory(addr uint64, p []byte) error {
	if err := g.Memory.ReadMemory(addr, p); err != nil {
		return err
	}
	if len(p) != 16 {
		return nil
	}
	fp, ra := binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint64(p[8:])
	switch {
	case g.fake[addr]:
		binary.LittleEndian.PutUint64(p, 0)
		binary.LittleEndian.PutUint64(p[8:], g.ra)
	case fp == 0 && ra >= g.start && ra < g.end:
		binary.LittleEndian.PutUint64(p, addr+32)
		g.fake[addr+32] = true
	}
	return nil
}

// TestARM64StaticCoreEndsAtStart: in the core of a static aarch64 program
// (written by qemu-user, which records no NT_FILE: --exe places the
// executable by the core's AT_ENTRY), every method ends the walk at
// _start, even when the frame-pointer chain goes on past it.
func TestARM64StaticCoreEndsAtStart(t *testing.T) {
	exe, core, _ := fixture.QemuARM64Core(t, arm64Prog, "-O0")
	c, err := corefile.Open(core)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tg, err := c.Target(nil, exe)
	if err != nil {
		t.Fatal(err)
	}
	if tg.Arch != regs.ARM64 || len(tg.Contexts) != 1 {
		t.Fatalf("arch %v, %d threads", tg.Arch, len(tg.Contexts))
	}
	f, err := elfobj.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lo, hi, ok1 := f.SymbolExtent("_start")
	mainAddr, ok2 := f.SymbolByName("main")
	if !ok1 || !ok2 {
		t.Fatal("no _start or main symbol")
	}
	sym := &symbolize.Symbolizer{}
	for _, name := range unwind.MethodNames {
		if name == "sframe" || name == "gopclntab" {
			continue // gcc 12 writes no .sframe; C has no pcln table
		}
		u, _ := unwind.ByName(name)
		for _, garbage := range []bool{false, true} {
			mem := tg.Mem
			if garbage {
				mem = &garbageAboveStart{Memory: tg.Mem, start: lo, end: hi, ra: mainAddr + 16, fake: map[uint64]bool{}}
			}
			st := u.Walk(tg.Contexts[0].Regs, mem, tg.Space)
			th := stacks.Symbolize(tg.Contexts[0].TID, "", &st, sym)
			var names []string
			for _, fr := range th.Frames {
				names = append(names, fr.Function)
			}
			if len(names) < 6 || names[len(names)-1] != "_start" || names[len(names)-2] != "__libc_start_main_impl" ||
				(st.End != unwind.EndOutermost && st.End != unwind.EndRAUndefined) {
				t.Errorf("%s (garbage past _start: %v): end %s %s, frames %v", name, garbage, st.End, st.Detail, names)
			}
		}
	}
}
