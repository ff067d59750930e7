package unwind

import (
	"path/filepath"
	"testing"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/unwindtable"
)

// Objects the issue asks table numbers for: the system libc, gdb, and gcc's
// cc1 (a large C program).
var benchObjects = []string{
	"/usr/lib/x86_64-linux-gnu/libc.so.6",
	"/usr/bin/gdb",
	"/usr/lib/gcc/x86_64-linux-gnu/12/cc1",
}

// BenchmarkBuildTable measures compiling an object's CFI into a table (the
// file is opened and its sections read once, outside the timing) and
// reports the table's size.
func BenchmarkBuildTable(b *testing.B) {
	for _, path := range benchObjects {
		f, err := elfobj.Open(path)
		if err != nil {
			b.Logf("skip %s: %v", path, err)
			continue
		}
		b.Run(filepath.Base(path), func(b *testing.B) {
			var rows, bytes int
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				t, err := unwindtable.BuildFile(f)
				if err != nil {
					b.Fatal(err)
				}
				rows, bytes = t.Stats().Rows, t.Bytes()
			}
			b.ReportMetric(float64(rows), "rows")
			b.ReportMetric(float64(bytes), "table-bytes")
			b.ReportMetric(float64(bytes)/float64(rows), "bytes/row")
		})
		f.Close()
	}
}

// BenchmarkLookup measures one table lookup at PCs spread over libc.
func BenchmarkLookup(b *testing.B) {
	f, err := elfobj.Open(benchObjects[0])
	if err != nil {
		b.Skip(err)
	}
	defer f.Close()
	t, err := unwindtable.BuildFile(f)
	if err != nil {
		b.Fatal(err)
	}
	var pcs []uint64
	t.Rows(func(start, end uint64, r *unwindtable.Rule) {
		if r.CFABase != 0 {
			pcs = append(pcs, (start+end)/2)
		}
	})
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, ok := t.Lookup(pcs[(i*7919)%len(pcs)]); !ok {
			b.Fatal("miss")
		}
	}
}
