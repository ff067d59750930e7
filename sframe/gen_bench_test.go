package sframe_test

import (
	"math/rand"
	"os/exec"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/corefile"
	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/sframe"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
	"github.com/rewindstack/rewind/unwindtable"
)

// benchObjects are the objects the issue names for sizes: libc, gdb, cc1.
func benchObjects(b *testing.B) map[string]string {
	objs := map[string]string{"libc": "/lib/x86_64-linux-gnu/libc.so.6"}
	if p, err := exec.LookPath("gdb"); err == nil {
		objs["gdb"] = p
	}
	if out, err := exec.Command("gcc", "-print-prog-name=cc1").Output(); err == nil {
		objs["cc1"] = strings.TrimSpace(string(out))
	}
	return objs
}

// BenchmarkGenerate measures compiling an object's .eh_frame into an
// encoded .sframe section, and reports its size against .eh_frame plus
// .eh_frame_hdr (as a percentage too), the numbers of FDEs and FREs and
// the functions skipped.
func BenchmarkGenerate(b *testing.B) {
	for _, name := range []string{"libc", "gdb", "cc1"} {
		path, ok := benchObjects(b)[name]
		if !ok {
			b.Fatalf("%s not found (install gdb and gcc)", name)
		}
		f, err := elfobj.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		for _, v := range []uint8{2, 3} {
			b.Run(name+"/v"+string(rune('0'+v)), func(b *testing.B) {
				var g *sframe.Generated
				for i := 0; i < b.N; i++ {
					if g, err = sframe.Generate(f, sframe.GenOptions{Version: v}); err != nil {
						b.Fatal(err)
					}
					if _, err := g.Encode(0x100000); err != nil {
						b.Fatal(err)
					}
				}
				eh := float64(f.EhFrame.Size + f.EhFrameHdr.Size)
				b.ReportMetric(float64(g.Size()), "sframe-bytes")
				b.ReportMetric(eh, "eh-bytes")
				b.ReportMetric(100*float64(g.Size())/eh, "%-of-eh")
				b.ReportMetric(float64(g.Stats.FDEs), "fdes")
				b.ReportMetric(float64(g.Stats.FREs), "fres")
				b.ReportMetric(float64(len(g.Stats.Skipped)), "skipped")
			})
		}
		f.Close()
	}
}

// BenchmarkGenLookup compares a lookup in libc's generated section (v2 and
// v3) with the CFI table's, at the same random PCs.
func BenchmarkGenLookup(b *testing.B) {
	f, err := elfobj.Open("/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	tab, err := unwindtable.BuildFile(f)
	if err != nil {
		b.Fatal(err)
	}
	secs := map[uint8]*sframe.Section{}
	for _, v := range []uint8{2, 3} {
		_, secs[v] = generate(b, f, v, 0x200000)
	}
	rng := rand.New(rand.NewSource(1))
	pcs := make([]uint64, 4096)
	for i := range pcs {
		s := secs[2]
		fde := s.FDE(rng.Intn(s.NumFDEs()))
		pcs[i] = fde.Start + uint64(rng.Intn(int(max(fde.Size, 1))))
	}
	for _, v := range []uint8{2, 3} {
		sec := secs[v]
		b.Run("sframe-v"+string(rune('0'+v)), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, ok := sec.Lookup(pcs[i&4095]); !ok {
					b.Fatal("no row")
				}
			}
		})
	}
	b.Run("cfi-table", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, ok := tab.Lookup(pcs[i&4095]); !ok {
				b.Fatal("no rule")
			}
		}
	})
}

// BenchmarkGenUnwindDeep walks the same captured 2000-frame stack (the
// recurse fixture at -O2 without frame pointers, stack copied into memory)
// with SFrame sections generated for every object and with the CFI
// tables, and reports the cost per frame.
func BenchmarkGenUnwindDeep(b *testing.B) {
	exe := fixture.Build(b, "recurse", fixture.Variants[3])
	p := fixture.Start(b, exe, "2000")
	core := fixture.Gcore(b, p)
	c, err := corefile.Open(core)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	tg, err := c.Target(&target.Objects{}, exe)
	if err != nil {
		b.Fatal(err)
	}
	var deepest target.Context
	frames := 0
	dwarf := unwind.NewDWARF()
	dwarf.MaxDepth = 100000
	for _, th := range tg.Contexts {
		if st := dwarf.Walk(th.Regs, c, tg.Space); len(st.Frames) > frames {
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
	mem := &target.Snapshot{Regions: []target.Region{{Addr: sp, Data: buf}}, Next: c}
	for _, m := range []struct {
		name string
		u    *unwind.Unwinder
	}{
		{"sframe-v2", &unwind.Unwinder{Steppers: []unwind.Stepper{unwind.SFrame{Source: (&genSource{version: 2}).Section}, unwind.CFITable{}}}},
		{"sframe-v3", &unwind.Unwinder{Steppers: []unwind.Stepper{unwind.SFrame{Source: (&genSource{version: 3}).Section}, unwind.CFITable{}}}},
		{"cfi-table", unwind.NewDWARF()},
	} {
		m.u.MaxDepth = 100000
		b.Run(m.name, func(b *testing.B) {
			var st unwind.Stack
			m.u.WalkInto(&st, deepest.Regs, mem, tg.Space) // warm: sections generated, tables built
			if len(st.Frames) != frames {
				b.Fatalf("%s walk found %d frames, the CFI walk %d (end %v %s)", m.name, len(st.Frames), frames, st.End, st.Detail)
			}
			bySFrame := 0
			for _, fr := range st.Frames {
				if fr.Method == unwind.MethodSFrame {
					bySFrame++
				}
			}
			if strings.HasPrefix(m.name, "sframe") && bySFrame < frames-2 {
				b.Fatalf("only %d of %d frames came from the generated SFrame", bySFrame, frames)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				m.u.WalkInto(&st, deepest.Regs, mem, tg.Space)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(st.Frames)), "ns/frame")
			b.ReportMetric(float64(len(st.Frames)), "frames")
		})
	}
}
