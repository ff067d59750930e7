package perfdata

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestStreamSameAsMapped reads a file of 50,000 records (3 MB, several
// of OpenStream's chunks, records straddling their edges) with Open and
// with OpenStream: the same records come, at the same offsets, with the
// same bytes; Offset finds each record in the stream's memory while it is
// valid; releasing what was read as it goes changes nothing; a file cut
// inside its data section ends with the same error either way.
func TestStreamSameAsMapped(t *testing.T) {
	var recs [][]byte
	for range 10000 {
		recs = append(recs, testRecords()...)
	}
	full := testFile(recs)
	dir := t.TempDir()
	type rec struct {
		off  int64
		raw  []byte
		stck []byte
	}
	read := func(path string, stream bool) ([]rec, error) {
		var f *File
		var err error
		if stream {
			f, err = OpenStream(path, 0)
		} else {
			f, err = Open(path)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if stream != (f.stream != nil) {
			t.Fatalf("stream %v: the file is read with pread: %v", stream, f.stream != nil)
		}
		var out []rec
		err = f.Records(func(r *Record) error {
			off := f.Offset(r.Raw)
			if off < 0 {
				t.Fatalf("record %d: Offset found no offset", len(out))
			}
			var stack []byte
			if r.Type == RecordSample && r.Sample != nil {
				stack = bytes.Clone(r.Sample.Stack)
			}
			out = append(out, rec{off, bytes.Clone(r.Raw), stack})
			if len(out)%1000 == 0 {
				f.Release(off)
			}
			return nil
		})
		return out, err
	}
	for _, cut := range []int{len(full), len(full) - 100, len(full) / 2, 600 << 10} {
		path := filepath.Join(dir, "perf.data")
		if err := os.WriteFile(path, full[:cut], 0o600); err != nil {
			t.Fatal(err)
		}
		m, merr := read(path, false)
		s, serr := read(path, true)
		if (merr == nil) != (serr == nil) || (merr != nil && merr.Error() != serr.Error()) {
			t.Errorf("cut at %d: mapped: %v, streamed: %v", cut, merr, serr)
		}
		if len(m) != len(s) {
			t.Fatalf("cut at %d: %d records mapped, %d streamed", cut, len(m), len(s))
		}
		if cut == len(full) && len(m) != len(recs) {
			t.Errorf("%d records of %d", len(m), len(recs))
		}
		for i := range m {
			if m[i].off != s[i].off || !bytes.Equal(m[i].raw, s[i].raw) || !bytes.Equal(m[i].stck, s[i].stck) {
				t.Fatalf("cut at %d: record %d differs: at %#x, %d bytes mapped; at %#x, %d bytes streamed", cut, i, m[i].off, len(m[i].raw), s[i].off, len(s[i].raw))
			}
		}
	}
}
