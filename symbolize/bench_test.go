package symbolize

import (
	"github.com/rewindstack/rewind/target"
	"testing"
)

// benchPCs returns up to n distinct return addresses of calls in exe (as
// runtime PCs in space).
func benchPCs(b *testing.B, exe string, space *target.AddressSpace, bias uint64, n int) []testFrame {
	var frames []testFrame
	insns := disassemble(b, exe)
	step := max(1, len(insns)/n)
	for i := 0; i < len(insns) && len(frames) < n; i += step {
		frames = append(frames, testFrame{PC: insns[i].addr + bias + 1})
	}
	if len(frames) < n/2 {
		b.Fatalf("only %d addresses in %s", len(frames), exe)
	}
	return frames
}

// benchmarkSymbolize measures symbolizing 10,000 distinct PCs of one
// object, with inline expansion:
//
//   - first: the first lookup with an empty cache (opening the object and
//     its debug file, loading the sections, building the top-level index);
//   - cold: all 10,000 PCs with an empty cache (first use included; the
//     DWARF units or Go functions they hit are parsed on the way), per PC;
//   - index: one PC once every unit is parsed but without the per-address
//     result cache (the cost of the index itself);
//   - warm: one PC answered from the per-address cache (repeated dumps).
func benchmarkSymbolize(b *testing.B, exe string) {
	space, bias := loadSpace(b, exe)
	frames := benchPCs(b, exe, space, bias, 10000)
	b.Run("first", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			sym := &Symbolizer{Inlines: true, Cache: NewCache()}
			testFrameAt(sym, space, frames[0])
		}
	})
	b.Run("cold", func(b *testing.B) {
		levels := 0
		for i := 0; i < b.N; i++ {
			sym := &Symbolizer{Inlines: true, Cache: NewCache()}
			for j := range frames {
				levels += len(testFrameAt(sym, space, frames[j]))
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(frames)), "ns/pc")
		b.ReportMetric(float64(levels)/float64(b.N*len(frames)), "entries/pc")
	})
	sym := &Symbolizer{Inlines: true, Cache: NewCache()}
	for j := range frames {
		testFrameAt(sym, space, frames[j])
	}
	b.Run("index", func(b *testing.B) {
		m := space.Find(frames[0].PC)
		mi := sym.module(m.Module)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			f := &frames[i%len(frames)]
			mi.info.compute(f.LookupPC()-m.Bias, mi)
		}
	})
	b.Run("warm", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			testFrameAt(sym, space, frames[i%len(frames)])
		}
	})
}

// BenchmarkSymbolizeLibc: 10,000 PCs spread over libc, with the libc6-dbg
// debug file (DWARF 5, about 9 MB of .debug_info once decompressed).
func BenchmarkSymbolizeLibc(b *testing.B) {
	lib, _ := libcPath(b)
	benchmarkSymbolize(b, lib)
}

// BenchmarkSymbolizeGo: 10,000 PCs spread over a Go binary's pcln table.
func BenchmarkSymbolizeGo(b *testing.B) {
	benchmarkSymbolize(b, buildGo(b))
}
