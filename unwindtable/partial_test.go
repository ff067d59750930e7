package unwindtable_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rewindstack/rewind/cfi"
	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/unwindtable"
)

// partialOf returns the full table of an installed object and what a
// partial table of it is compiled from; it skips objects that have CFI
// besides a searchable .eh_frame.
func partialOf(t testing.TB, path string) (full *unwindtable.Table, key string, hdr *cfi.EhFrameHdr, eh *cfi.Section) {
	t.Helper()
	f, err := elfobj.Open(path)
	if err != nil {
		t.Skipf("%s not installed: %v", path, err)
	}
	t.Cleanup(func() { f.Close() })
	if f.EhFrame == nil || f.EhFrameHdr == nil || f.DebugFrame != nil {
		t.Skipf("%s: not only .eh_frame with .eh_frame_hdr", path)
	}
	if full, err = unwindtable.BuildFile(f); err != nil {
		t.Fatal(err)
	}
	hd, err := f.EhFrameHdr.Load()
	if err != nil {
		t.Fatal(err)
	}
	if hdr, err = cfi.ParseEhFrameHdr(hd, f.EhFrameHdr.Addr, f.ByteOrder, path); err != nil {
		t.Fatal(err)
	}
	if _, err := f.EhFrame.Load(); err != nil {
		t.Fatal(err)
	}
	return full, f.BuildIDHex(), hdr, unwindtable.CFISection(f, f.EhFrame, cfi.EhFrame)
}

// sameLookup requires the partial table to answer pc as the full one does
// (the full table is checked against readelf --debug-dump=frames-interp
// in package cfi and by TestBuildMatchesReadelf).
func sameLookup(t *testing.T, name string, got, want *unwindtable.Table, pc uint64) {
	t.Helper()
	gr, gok := got.Lookup(pc)
	wr, wok := want.Lookup(pc)
	if gok != wok || gok && (*gr != *wr || !sameExprs(got, want, gr, wr)) {
		t.Fatalf("%s: pc %#x: partial %v %v, full %v %v", name, pc, gr, gok, wr, wok)
	}
}

// sameExprs compares the expressions two equal rules name.
func sameExprs(a, b *unwindtable.Table, ra, rb *unwindtable.Rule) bool {
	expr := func(k unwindtable.RegKind) bool { return k == unwindtable.RegExpr || k == unwindtable.RegValExpr }
	same := func(i int32) bool { return string(a.Expr(i)) == string(b.Expr(i)) }
	return (ra.CFABase != unwindtable.CFAExpr || same(ra.CFAOffset)) &&
		(!expr(ra.RAKind) || same(ra.RAOffset)) && (!expr(ra.FPKind) || same(ra.FPOffset))
}

// TestPartialMatchesFull looks up the first, a middle and the last
// address of every row of libc's, ld.so's and libstdc++'s tables in a
// partial table, which compiles each FDE as it is first asked for, and in
// a second partial table decoded from what the first saved half-way.
func TestPartialMatchesFull(t *testing.T) {
	for _, path := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2",
		"/usr/lib/x86_64-linux-gnu/libstdc++.so.6"} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			full, _, hdr, eh := partialOf(t, path)
			part := unwindtable.NewPartial(full.Arch(), hdr, eh)
			if !part.Partial() || part.Changed() {
				t.Fatal("a new partial table is not partial, or changed")
			}
			var pcs []uint64
			full.Rows(func(start, end uint64, r *unwindtable.Rule) {
				pcs = append(pcs, start, start+(end-start)/2, end-1)
			})
			pcs = append(pcs, 0, 1<<62)
			half := len(pcs) / 2
			for _, pc := range pcs[:half] {
				sameLookup(t, "partial", part, full, pc)
			}
			if !part.Changed() {
				t.Fatal("lookups compiled nothing")
			}
			enc, err := part.MarshalPartial()
			if err != nil {
				t.Fatal(err)
			}
			again, err := unwindtable.UnmarshalPartial(enc, hdr, eh)
			if err != nil {
				t.Fatal(err)
			}
			if again.Changed() || again.Stats().FDEs != part.Stats().FDEs {
				t.Fatalf("decoded: changed %v, %d FDEs, want %d", again.Changed(), again.Stats().FDEs, part.Stats().FDEs)
			}
			for _, pc := range pcs[:half] {
				sameLookup(t, "decoded", again, full, pc)
			}
			if again.Changed() {
				t.Fatal("looking up compiled FDEs again changed the table")
			}
			for _, pc := range pcs {
				sameLookup(t, "partial", part, full, pc)
				sameLookup(t, "decoded", again, full, pc)
			}
			// FDEs that others cover whole are never compiled (the
			// full table counts them, though they make no rows).
			if st := part.Stats(); st.FDEs > full.Stats().FDEs || st.FDEs < full.Stats().FDEs*9/10 {
				t.Errorf("every row looked up compiled %d FDEs, the full table has %d", st.FDEs, full.Stats().FDEs)
			}
			// Every strict prefix of the encoding is refused.
			for _, n := range []int{0, 8, 12, 20, len(enc) / 2, len(enc) - 1} {
				if _, err := unwindtable.UnmarshalPartial(enc[:n], hdr, eh); err == nil {
					t.Fatalf("an encoding cut to %d of %d bytes was accepted", n, len(enc))
				}
			}
		})
	}
}

// TestCachePartial checks that a Cache keeps a partial table's FDEs for
// the next process, grows the file when a later run compiles more, and
// prefers a full table when one is cached.
func TestCachePartial(t *testing.T) {
	full, key, hdr, eh := partialOf(t, "/lib/x86_64-linux-gnu/libc.so.6")
	if key == "" {
		t.Skip("libc has no build-id")
	}
	var starts []uint64
	full.Rows(func(start, end uint64, r *unwindtable.Rule) {
		if r.CFABase != unwindtable.CFANone {
			starts = append(starts, start)
		}
	})
	dir := t.TempDir()
	c1 := &unwindtable.Cache{Dir: dir, Partial: true}
	t1, err := c1.GetPartial(key, full.Arch(), hdr, eh)
	if err != nil || !t1.Partial() {
		t.Fatalf("GetPartial: %v, partial %v", err, t1.Partial())
	}
	t1.Lookup(starts[0])
	c1.Wait()
	files, _ := filepath.Glob(filepath.Join(dir, "tables", "*", "*-partial"))
	if len(files) != 1 {
		t.Fatalf("files %v, want one partial table", files)
	}
	c2 := &unwindtable.Cache{Dir: dir, Partial: true}
	t2, _ := c2.GetPartial(key, full.Arch(), hdr, eh)
	if t2.Stats().FDEs != 1 || t2.Changed() {
		t.Fatalf("read back: %d FDEs (changed %v), want the one compiled", t2.Stats().FDEs, t2.Changed())
	}
	sameLookup(t, "read back", t2, full, starts[0])
	sameLookup(t, "read back", t2, full, starts[len(starts)-1])
	c2.Wait()
	c3 := &unwindtable.Cache{Dir: dir, Partial: true}
	if t3, _ := c3.GetPartial(key, full.Arch(), hdr, eh); t3.Stats().FDEs != 2 {
		t.Fatalf("grown file read back with %d FDEs, want 2", t3.Stats().FDEs)
	}
	// A damaged file is noted and the table compiled afresh.
	if err := os.WriteFile(files[0], []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	c4 := &unwindtable.Cache{Dir: dir, Partial: true}
	if t4, _ := c4.GetPartial(key, full.Arch(), hdr, eh); t4.Stats().FDEs != 0 {
		t.Fatalf("damaged file gave %d FDEs", t4.Stats().FDEs)
	}
	// A full table in the cache is used as it is.
	c5 := &unwindtable.Cache{Dir: dir}
	c5.Get(key, func() (*unwindtable.Table, error) { return full, nil })
	c6 := &unwindtable.Cache{Dir: dir, Partial: true}
	if t6, _ := c6.GetPartial(key, full.Arch(), hdr, eh); t6.Partial() {
		t.Fatal("a cached full table was not used")
	}
}

// FuzzUnmarshalPartial damages an encoded partial table: decoding must
// fail cleanly or give a table whose lookups do not panic.
func FuzzUnmarshalPartial(f *testing.F) {
	full, _, hdr, eh := partialOf(f, "/lib64/ld-linux-x86-64.so.2")
	part := unwindtable.NewPartial(full.Arch(), hdr, eh)
	var pcs []uint64
	full.Rows(func(start, end uint64, r *unwindtable.Rule) { pcs = append(pcs, start, end-1) })
	for i := 0; i < len(pcs); i += 7 {
		part.Lookup(pcs[i])
	}
	enc, _ := part.MarshalPartial()
	f.Add(uint32(0), []byte{})
	f.Add(uint32(9), []byte{0xff, 0xff, 0xff, 0xff})
	f.Add(uint32(21), []byte{0, 0, 0, 0})
	f.Add(uint32(len(enc)/2), []byte{0xff, 0xff})
	f.Add(uint32(len(enc)-1), []byte{1})
	f.Fuzz(func(t *testing.T, off uint32, patch []byte) {
		b := damaged(enc, off, patch)
		got, err := unwindtable.UnmarshalPartial(b, hdr, eh)
		if err != nil {
			return
		}
		for _, pc := range pcs {
			if r, ok := got.Lookup(pc); ok {
				got.Expr(r.CFAOffset)
			}
		}
		got.Rows(func(start, end uint64, r *unwindtable.Rule) {})
		got.MarshalBinary()
	})
}
