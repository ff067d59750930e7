package stacks_test

import (
	"testing"

	"github.com/rewindstack/rewind/corefile"
	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// deepSnapshot captures the recurse fixture (2000 frames, -O2 with frame
// pointers, so both methods can walk all of it) and returns the worker
// thread's registers with its stack copied into memory, as `rewind dump`
// copies stacks before unwinding.
func deepSnapshot(b *testing.B) (target.Context, *target.Snapshot, *target.AddressSpace) {
	exe := fixture.Build(b, "recurse", fixture.Variant{Name: "O2-fp", Flags: []string{"-O2", "-fno-omit-frame-pointer"}})
	p := fixture.Start(b, exe, "2000")
	core := fixture.Gcore(b, p)
	c, err := corefile.Open(core)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	tg, err := c.Target(objs, exe)
	if err != nil {
		b.Fatal(err)
	}
	var deepest target.Context
	var frames int
	for _, th := range tg.Contexts {
		st := unwind.NewDWARF().Walk(th.Regs, c, tg.Space)
		if len(st.Frames) > frames {
			deepest, frames = th, len(st.Frames)
		}
	}
	sp, _ := deepest.Regs.SP()
	_, end, ok := c.SegmentAt(sp)
	if !ok {
		b.Fatal("stack pointer not in the core")
	}
	buf := make([]byte, end-sp)
	if err := c.ReadMemory(sp, buf); err != nil {
		b.Fatal(err)
	}
	// Code is read from the core (file-backed) only for trampoline checks.
	return deepest, &target.Snapshot{Regions: []target.Region{{Addr: sp, Data: buf}}, Next: c}, tg.Space
}

// BenchmarkUnwindDeep reports the cost per frame of walking a captured
// 2000-frame stack with each method (tables already built).
func BenchmarkUnwindDeep(b *testing.B) {
	th, mem, space := deepSnapshot(b)
	for _, m := range []struct {
		name string
		u    *unwind.Unwinder
	}{{"fp", unwind.NewFP()}, {"dwarf", unwind.NewDWARF()}, {"auto", unwind.NewAuto()}} {
		m.u.MaxDepth = 100000
		b.Run(m.name, func(b *testing.B) {
			var st unwind.Stack
			m.u.WalkInto(&st, th.Regs, mem, space) // warm: tables built, caches filled
			if len(st.Frames) < 2000 {
				b.Fatalf("%s walk found %d frames (end %v %s)", m.name, len(st.Frames), st.End, st.Detail)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				m.u.WalkInto(&st, th.Regs, mem, space)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(st.Frames)), "ns/frame")
			b.ReportMetric(float64(len(st.Frames)), "frames")
		})
	}
}
