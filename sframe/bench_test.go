package sframe_test

import (
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/sframe"
	"github.com/rewindstack/rewind/unwindtable"
)

// manyLib builds a shared library of n functions with SFrame (v1 with the
// system binutils) once per benchmark run.
func manyLib(b *testing.B, n int) *elfobj.File {
	b.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		b.Skip("gcc not installed")
	}
	dir := b.TempDir()
	src := filepath.Join(dir, "many.c")
	if err := os.WriteFile(src, []byte(manyFunctions(n)), 0o644); err != nil {
		b.Fatal(err)
	}
	so := filepath.Join(dir, "libmany.so")
	if out, err := exec.Command("gcc", "-O2", "-Wa,--gsframe", "-shared", "-fPIC", "-o", so, src).CombinedOutput(); err != nil {
		b.Fatalf("gcc: %v\n%s", err, out)
	}
	f, err := elfobj.Open(so)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	return f
}

// BenchmarkLookup measures Lookup at random PCs of a 5000-function library
// (binary search over the FDEs, then a scan of the function's FREs), with
// the CFI table's lookup for comparison, and reports the section sizes:
// .sframe against .eh_frame plus .eh_frame_hdr.
func BenchmarkLookup(b *testing.B) {
	f := manyLib(b, 5000)
	sec, err := sframe.Parse(f.SFrame.Data, f.SFrame.Addr, "libmany.so .sframe")
	if err != nil {
		b.Fatal(err)
	}
	tab, err := unwindtable.BuildFile(f)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	pcs := make([]uint64, 4096)
	for i := range pcs {
		fde := sec.FDE(rng.Intn(sec.NumFDEs()))
		pcs[i] = fde.Start + uint64(rng.Intn(int(max(fde.Size, 1))))
	}
	sizes := func(b *testing.B) {
		b.ReportMetric(float64(len(f.SFrame.Data)), "sframe-bytes")
		b.ReportMetric(float64(len(f.EhFrame.Data)+len(f.EhFrameHdr.Data)), "eh-bytes")
		b.ReportMetric(float64(sec.NumFDEs()), "fdes")
	}
	b.Run("sframe", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, ok := sec.Lookup(pcs[i&4095]); !ok {
				b.Fatal("no row")
			}
		}
		sizes(b)
	})
	b.Run("cfi-table", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, ok := tab.Lookup(pcs[i&4095]); !ok {
				b.Fatal("no rule")
			}
		}
	})
	b.Run("parse", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := sframe.Parse(f.SFrame.Data, f.SFrame.Addr, "x"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
