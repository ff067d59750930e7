package unwindtable_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/unwindtable"
)

// tableOf compiles the CFI of an installed object.
func tableOf(t testing.TB, path string) (*unwindtable.Table, string) {
	t.Helper()
	f, err := elfobj.Open(path)
	if err != nil {
		t.Skipf("%s not installed: %v", path, err)
	}
	defer f.Close()
	tab, err := unwindtable.BuildFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return tab, f.BuildIDHex()
}

type row struct {
	start, end uint64
	rule       unwindtable.Rule
}

func rowsOf(t *unwindtable.Table) []row {
	var out []row
	t.Rows(func(start, end uint64, r *unwindtable.Rule) { out = append(out, row{start, end, *r}) })
	return out
}

// sameTable requires equal rows, rules, expressions and stats.
func sameTable(t *testing.T, name string, got, want *unwindtable.Table) {
	t.Helper()
	if !reflect.DeepEqual(rowsOf(got), rowsOf(want)) {
		t.Fatalf("%s: rows differ after a round trip", name)
	}
	if got.Stats() != want.Stats() || got.Arch() != want.Arch() || got.Bytes() != want.Bytes() {
		t.Fatalf("%s: stats %+v, want %+v", name, got.Stats(), want.Stats())
	}
	for i := int32(0); i < int32(want.Stats().Exprs); i++ {
		if string(got.Expr(i)) != string(want.Expr(i)) {
			t.Fatalf("%s: expression %d differs", name, i)
		}
	}
}

// TestMarshalRoundTrip encodes the tables of libc, ld.so and libstdc++
// (tables with expressions, PLT and signal rules) and decodes them back.
func TestMarshalRoundTrip(t *testing.T) {
	for _, path := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2",
		"/usr/lib/x86_64-linux-gnu/libstdc++.so.6"} {
		want, _ := tableOf(t, path)
		b, err := want.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		got := &unwindtable.Table{}
		if err := got.UnmarshalBinary(b); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		sameTable(t, path, got, want)
		// Every strict prefix is refused.
		for _, n := range []int{0, 7, 8, 40, len(b) / 2, len(b) - 1} {
			if err := (&unwindtable.Table{}).UnmarshalBinary(b[:n]); err == nil {
				t.Fatalf("%s: a table cut to %d of %d bytes was accepted", path, n, len(b))
			}
		}
		t.Logf("%s: %d rows, %d bytes encoded", path, want.Stats().Rows, len(b))
	}
}

// TestCacheDir checks that a Cache with Dir saves tables keyed by build-id
// and that a second Cache (another process) loads them without building,
// and rebuilds when the file is damaged.
func TestCacheDir(t *testing.T) {
	want, key := tableOf(t, "/lib/x86_64-linux-gnu/libc.so.6")
	if key == "" {
		t.Skip("libc has no build-id")
	}
	dir := t.TempDir()
	builds := 0
	build := func() (*unwindtable.Table, error) { builds++; return want, nil }
	c1 := &unwindtable.Cache{Dir: dir}
	if _, err := c1.Get(key, build); err != nil || builds != 1 {
		t.Fatalf("first Get: err %v, %d builds", err, builds)
	}
	c2 := &unwindtable.Cache{Dir: dir}
	got, err := c2.Get(key, build)
	if err != nil || builds != 1 {
		t.Fatalf("second Get built again (err %v, %d builds)", err, builds)
	}
	sameTable(t, "loaded", got, want)

	files, _ := filepath.Glob(filepath.Join(dir, "tables", "*", "*"))
	if len(files) != 1 {
		t.Fatalf("files %v, want one", files)
	}
	if err := os.WriteFile(files[0], []byte("RWUT0001 garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	c3 := &unwindtable.Cache{Dir: dir}
	if _, err := c3.Get(key, build); err != nil || builds != 2 {
		t.Fatalf("damaged file: err %v, %d builds, want a rebuild", err, builds)
	}
	// Path keys (objects without a build-id) are never written.
	c4 := &unwindtable.Cache{Dir: t.TempDir()}
	c4.Get("path:/x:1:2", build)
	if files, _ := filepath.Glob(filepath.Join(c4.Dir, "*")); len(files) != 0 {
		t.Fatalf("a path key was persisted: %v", files)
	}
	// Build errors are not persisted.
	c5 := &unwindtable.Cache{Dir: t.TempDir()}
	if _, err := c5.Get(key, func() (*unwindtable.Table, error) { return nil, errors.New("broken") }); err == nil {
		t.Fatal("build error lost")
	}
}

// FuzzUnmarshal damages an encoded table: decoding must fail cleanly or
// give a table whose Lookup and Rows do not panic.
func FuzzUnmarshal(f *testing.F) {
	tab, _ := tableOf(f, "/lib64/ld-linux-x86-64.so.2")
	enc, _ := tab.MarshalBinary()
	f.Add(uint32(0), []byte{})
	f.Add(uint32(10), []byte{0xff, 0xff, 0xff, 0xff})
	f.Add(uint32(26), []byte{0, 0, 0, 0})
	f.Add(uint32(len(enc)/2), []byte{0xff, 0xff})
	f.Add(uint32(len(enc)-1), []byte{1})
	f.Fuzz(func(t *testing.T, off uint32, patch []byte) {
		b := damaged(enc, off, patch)
		got := &unwindtable.Table{}
		if got.UnmarshalBinary(b) != nil {
			return
		}
		got.Rows(func(start, end uint64, r *unwindtable.Rule) {
			got.Lookup(start)
			got.Lookup(end - 1)
		})
		for pc := uint64(0); pc < 1<<20; pc += 4093 {
			got.Lookup(pc)
		}
	})
}

// damaged is a fuzz input's copy of enc: patch written at off (wrapped to
// the length), and a one-byte patch cuts the copy there instead.
func damaged(enc []byte, off uint32, patch []byte) []byte {
	b := append([]byte(nil), enc...)
	copy(b[int(off)%len(b):], patch)
	if len(patch) == 1 {
		b = b[:int(off)%len(b)]
	}
	return b
}

// TestUnmarshalInPlace: a table decoded from aligned bytes (a mapped cache
// file is page-aligned) uses their arrays in place and takes almost no
// memory of its own; from misaligned bytes it copies them; both decode
// the same table.
func TestUnmarshalInPlace(t *testing.T) {
	want, _ := tableOf(t, "/lib/x86_64-linux-gnu/libc.so.6")
	enc, err := want.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	aligned := append(make([]byte, 0, len(enc)), enc...) // (large: page-aligned)
	misaligned := append(make([]byte, 1, len(enc)+1), enc...)[1:]
	for _, c := range []struct {
		name    string
		b       []byte
		inPlace bool
	}{{"aligned", aligned, true}, {"misaligned", misaligned, false}} {
		got := &unwindtable.Table{}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err := got.UnmarshalBinary(c.b)
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		sameTable(t, c.name, got, want)
		took := after.TotalAlloc - before.TotalAlloc
		if small := took < uint64(len(enc))/10; small != c.inPlace {
			t.Errorf("%s: decoding %d bytes allocated %d bytes", c.name, len(enc), took)
		}
		t.Logf("%s: decoding %d bytes allocated %d bytes", c.name, len(enc), took)
	}
}

// TestCacheUsesSavedTable: a large table Get built and saved is returned
// as read back from its file (mapped: the built copy is dropped), and is
// the same table.
func TestCacheUsesSavedTable(t *testing.T) {
	want, key := tableOf(t, "/lib/x86_64-linux-gnu/libc.so.6")
	if key == "" {
		t.Skip("libc has no build-id")
	}
	c := &unwindtable.Cache{Dir: t.TempDir()}
	got, err := c.Get(key, func() (*unwindtable.Table, error) { return want, nil })
	if err != nil {
		t.Fatal(err)
	}
	if got == want {
		t.Fatalf("Get returned the built table (%d bytes), not the saved one", want.Bytes())
	}
	sameTable(t, "saved", got, want)
}
