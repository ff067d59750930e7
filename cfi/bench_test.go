package cfi

import "testing"

// BenchmarkParseLibc measures start-up cost over a whole library: Parse of
// the system libc's .eh_frame plus Rows over every FDE.
func BenchmarkParseLibc(b *testing.B) {
	sec := mustSection(b, libcPath, ".eh_frame")
	nrows := 0
	count := func(*Row) error { nrows++; return nil }
	b.SetBytes(int64(len(sec.Data)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		nrows = 0
		fdes, err := Parse(sec)
		if err != nil {
			b.Fatal(err)
		}
		for _, f := range fdes {
			if err := f.Rows(count); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(nrows), "rows/op")
}

// BenchmarkParseOnlyLibc measures Parse alone.
func BenchmarkParseOnlyLibc(b *testing.B) {
	sec := mustSection(b, libcPath, ".eh_frame")
	b.SetBytes(int64(len(sec.Data)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := Parse(sec); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLookupRowAt measures the unwind-time path: .eh_frame_hdr
// lookup, FDEAt and RowAt for one PC.
func BenchmarkLookupRowAt(b *testing.B) {
	eh := mustSection(b, libcPath, ".eh_frame")
	hs := mustSection(b, libcPath, ".eh_frame_hdr")
	h, err := ParseEhFrameHdr(hs.Data, hs.Addr, hs.ByteOrder, hs.Name)
	if err != nil {
		b.Fatal(err)
	}
	fdes, err := Parse(eh)
	if err != nil {
		b.Fatal(err)
	}
	pcs := make([]uint64, 0, len(fdes))
	for _, f := range fdes {
		pcs = append(pcs, f.Start+(f.End-f.Start)*3/4)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pc := pcs[i%len(pcs)]
		addr, ok := h.Lookup(pc)
		if !ok {
			b.Fatal("lookup failed")
		}
		f, err := FDEAt(eh, addr-eh.Addr)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := f.RowAt(pc); err != nil {
			b.Fatal(err)
		}
	}
}
