package perfdata

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/hugemem"
)

// writeAndRead writes img to a file and reads it back with readWhole; the
// file stays open (and the image mapped) until the test ends.
func writeAndRead(t *testing.T, img []byte) (path string, fd *os.File, data []byte) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "perf.data")
	if err := os.WriteFile(path, img, 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fd.Close() })
	if data, err = readWhole(fd, int64(len(img)), path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hugemem.Unmap(data) })
	return path, fd, data
}

// TestReadWhole reads a file split between several reads (a part boundary
// inside a record) and gets the image the file holds; a file that turns
// out shorter than its size says so, naming it and the offset.
func TestReadWhole(t *testing.T) {
	img := testFile(testRecords())
	// Pad the data past minReadPart so that the reads are split.
	big := bytes.Repeat(img, minReadPart/len(img)+2)
	path, fd, got := writeAndRead(t, big)
	if !bytes.Equal(got, big) {
		t.Fatal("the image read differs from the file")
	}
	f, err := Parse(got[:len(img)], path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := f.Records(func(*Record) error { n++; return nil }); err != nil || n != 5 {
		t.Fatalf("%d records, %v", n, err)
	}
	_, err = readWhole(fd, int64(len(big))+100, path)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "offset") || !strings.Contains(err.Error(), "shorter") {
		t.Fatalf("a file shorter than its size: %v", err)
	}
}

// TestOpenReadOrMapped opens the same recording mapped and read whole:
// the records are the same.
func TestOpenReadOrMapped(t *testing.T) {
	path, _, data := writeAndRead(t, testFile(testRecords()))
	mapped, err := Open(path) // too small to probe: mapped
	if err != nil {
		t.Fatal(err)
	}
	defer mapped.Close()
	if !mapped.mapped {
		t.Fatal("a small file was not mapped")
	}
	read, err := Parse(data, path)
	if err != nil {
		t.Fatal(err)
	}
	raws := func(f *File) (out [][]byte) {
		if err := f.Records(func(r *Record) error { out = append(out, bytes.Clone(r.Raw)); return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	a, b := raws(mapped), raws(read)
	if len(a) != len(b) || len(a) == 0 {
		t.Fatalf("%d records mapped, %d read", len(a), len(b))
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			t.Fatalf("record %d differs", i)
		}
	}
	if costlyPages(make([]byte, 1<<20)) {
		t.Error("a buffer too small to measure was found costly")
	}
}

// TestReadable: a file over readLimit is never read whole; a small one is
// where huge pages can be had.
func TestReadable(t *testing.T) {
	if readable(readLimit + 1) {
		t.Error("a file over readLimit may be read whole")
	}
	if got, want := readable(1<<20), hugemem.Available(); got != want {
		t.Errorf("readable(1 MiB) = %v, want %v (huge pages available: %v)", got, want, want)
	}
}
