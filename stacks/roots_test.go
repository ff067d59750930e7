package stacks_test

import (
	"testing"

	"github.com/rewindstack/rewind/internal/fixture"
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
		if len(st.Frames) != 1 || st.End != unwind.EndOutermost || th.Frames[0].Function != "__clone3" {
			t.Errorf("%s: %d frames (end %s %s), want __clone3 alone, ending as outermost: %+v", name, len(st.Frames), st.End, st.Detail, th.Frames)
		}
	}
}
