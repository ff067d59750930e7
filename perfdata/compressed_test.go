package perfdata

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/rewindstack/rewind/internal/testutil/fuzzcorpus"
	"github.com/rewindstack/rewind/internal/testutil/perfbomb"
)

// manySamples returns n sample records of testAttr that differ as a
// recording's do (times, addresses, stack contents), and their bytes.
func manySamples(r *rand.Rand, n int) ([][]byte, []byte) {
	var recs [][]byte
	var all []byte
	for i := 0; i < n; i++ {
		s := &enc{}
		ip := 0x400000 + uint64(r.IntN(1<<12))
		s.u64(ip)
		s.u32(100)
		s.u32(100 + uint32(r.IntN(4)))
		s.u64(uint64(1000 + 250*i))
		s.u32(uint32(r.IntN(2)))
		s.u32(0)
		s.u64(10101010)
		depth := 1 + r.IntN(6)
		s.u64(uint64(depth + 1))
		s.u64(ContextUser)
		for d := 0; d < depth; d++ {
			s.u64(0x400000 + uint64(r.IntN(1<<12)))
		}
		s.u64(RegsABI64)
		for k := 0; k < 17; k++ {
			s.u64(0x7ffd0000 + uint64(r.IntN(64))*8)
		}
		s.u64(64)
		for k := 0; k < 8; k++ {
			if r.IntN(2) == 0 {
				s.u64(0x400000 + uint64(r.IntN(1<<12)))
			} else {
				s.u64(0)
			}
		}
		s.u64(uint64(8 * (1 + r.IntN(8))))
		b := record(RecordSample, MiscUser, s.b, 0, 0, 0, false)
		recs = append(recs, b)
		all = append(all, b...)
	}
	return recs, all
}

// wrap cuts a compressed stream into COMPRESSED (or COMPRESSED2) records
// of random sizes, as perf cuts its own into records of at most 64 KiB.
func wrap(r *rand.Rand, z []byte, typ uint32) [][]byte {
	var out [][]byte
	for len(z) > 0 {
		n := min(len(z), 1+r.IntN(60000))
		if r.IntN(4) == 0 {
			n = min(len(z), 1+r.IntN(8))
		}
		out = append(out, compressedRecord(typ, z[:n]))
		z = z[n:]
	}
	return out
}

func compressedRecord(typ uint32, z []byte) []byte {
	e := &enc{}
	size := 8 + len(z)
	if typ == RecordCompressed2 {
		size = (8 + 8 + len(z) + 7) &^ 7
	}
	e.u32(typ)
	e.u16(0)
	e.u16(uint16(size))
	if typ == RecordCompressed2 {
		e.u64(uint64(len(z)))
	}
	e.b = append(e.b, z...)
	for len(e.b) < size {
		e.b = append(e.b, 0)
	}
	return e.b
}

// zstdCLI compresses data with the zstd command and args.
func zstdCLI(t *testing.T, data []byte, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("zstd", append([]string{"-q", "-c"}, args...)...)
	cmd.Stdin = bytes.NewReader(data)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("zstd %v: %v: %s", args, err, stderr.Bytes())
	}
	return out
}

// readAll returns the bytes of every record of the file b, the number of
// them that were decompressed, and Records' error.
func readAll(t *testing.T, b []byte) ([]byte, int, error) {
	t.Helper()
	f, err := Parse(b, "z.data")
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	n := 0
	err = f.Records(func(r *Record) error {
		out = append(out, r.Raw...)
		if r.Decompressed {
			n++
		}
		return nil
	})
	return out, n, err
}

// TestZstdCLI compresses a recording's worth of samples with the zstd
// command (the reference encoder, at the levels perf record -z offers and
// with the options a stream may use), cuts the stream into COMPRESSED and
// COMPRESSED2 records anywhere, and reads back the same records.
func TestZstdCLI(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	recs, all := manySamples(r, 8000)
	for _, args := range [][]string{
		{"-1"}, {"-3", "--no-check"}, {"-19"}, {"--fast=5"}, {"-9", "--long=27"},
	} {
		all, nrec := all, len(recs)
		if args[0] == "-19" {
			// (Level 19 takes 4 s a megabyte.)
			all = bytes.Clone(recs[0])
			for _, b := range recs[1:1000] {
				all = append(all, b...)
			}
			nrec = 1000
		}
		z := zstdCLI(t, all, args...)
		for _, typ := range []uint32{RecordCompressed, RecordCompressed2} {
			got, n, err := readAll(t, testFile(wrap(r, z, typ)))
			if err != nil || !bytes.Equal(got, all) || n != nrec {
				t.Errorf("zstd %v, type %d: %d of %d bytes, %d of %d records read back right (%v)", args, typ, commonPrefix(got, all), len(all), n, nrec, err)
			}
		}
	}
	// Frames one after another (two perf sessions' streams, or a
	// stream started again) are one stream of records.
	half := len(recs[0]) * (len(recs) / 2)
	z := append(zstdCLI(t, all[:half], "-1"), zstdCLI(t, all[half:], "-5")...)
	if got, _, err := readAll(t, testFile(wrap(r, z, RecordCompressed2))); err != nil || !bytes.Equal(got, all) {
		t.Errorf("two frames: %d of %d bytes read back right (%v)", commonPrefix(got, all), len(all), err)
	}
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// TestZstdCLIBad: streams the zstd command made, cut short, corrupted or
// asking for more history than perf's highest level does, end the walk
// with an error naming the file and the offset of a COMPRESSED record,
// after the records before the damage.
func TestZstdCLIBad(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	_, all := manySamples(r, 3000)
	z := zstdCLI(t, all, "-3")
	check := func(name string, z []byte, want string) {
		t.Helper()
		f, err := Parse(testFile(wrap(r, z, RecordCompressed2)), "bad.data")
		if err != nil {
			t.Fatal(err)
		}
		start, end := f.DataRange()
		err = f.Records(func(*Record) error { return nil })
		var fe *FormatError
		if !errors.As(err, &fe) || fe.File != "bad.data" || fe.Offset < uint64(start) || fe.Offset >= uint64(end) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want a FormatError in bad.data's data section [%#x, %#x) saying %q", name, err, start, end, want)
		}
	}
	check("cut", z[:len(z)/2], "decompressing")
	bad := bytes.Clone(z)
	bad[len(bad)-2] ^= 0x55 // the checksum
	check("checksum", bad, "decompressing")
	long := zstdCLI(t, all, "-1", "--long=28") // a 256 MiB window
	check("window", long, "decompressing")
	// Corruption anywhere: an error or the records, never a panic.
	for i := 0; i < 200; i++ {
		bad := bytes.Clone(z)
		for k := 0; k < 1+r.IntN(3); k++ {
			bad[r.IntN(len(bad))] ^= byte(1 + r.IntN(255))
		}
		f, err := Parse(testFile(wrap(r, bad, RecordCompressed)), "bad.data")
		if err != nil {
			t.Fatal(err)
		}
		f.Records(func(*Record) error { return nil })
	}
}

// TestCompressedOrder: records written between COMPRESSED records (perf
// writes the ones it makes itself, FINISHED_ROUND and the mappings of
// processes it finds, uncompressed) come in file order with the
// decompressed ones, which are marked.
func TestCompressedOrder(t *testing.T) {
	recs := testRecords() // COMM, MMAP2, FORK, SAMPLE, SAMPLE
	var z bytes.Buffer
	e, err := zstd.NewWriter(&z, zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	piece := func(rs ...[]byte) []byte {
		for _, b := range rs {
			e.Write(b)
		}
		if err := e.Flush(); err != nil {
			t.Fatal(err)
		}
		out := compressedRecord(RecordCompressed2, z.Bytes())
		z.Reset()
		return out
	}
	file := [][]byte{piece(recs[0], recs[1]), recs[2], piece(recs[3]), piece(recs[4])}
	checkSynthetic(t, testFile(file))
	f, err := Parse(testFile(file), "x")
	if err != nil {
		t.Fatal(err)
	}
	var marks []bool
	f.Records(func(r *Record) error { marks = append(marks, r.Decompressed); return nil })
	if want := []bool{true, true, false, true, true}; !slicesEqual(marks, want) {
		t.Errorf("Decompressed %v, want %v", marks, want)
	}
}

func slicesEqual[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestDecompressionBomb reads perf.data files of one MiB and less whose
// compressed records expand to 1 GiB of valid samples: the walk stops at
// the limit with an error saying so, having delivered the records up to
// it, and the whole walk allocates a few MiB (the window, the decoder's
// history), not what the records expand to.
func TestDecompressionBomb(t *testing.T) {
	for _, kind := range []perfbomb.Kind{perfbomb.Dwarf, perfbomb.Tiny} {
		path := filepath.Join(t.TempDir(), "bomb.data")
		res, err := perfbomb.Write(path, perfbomb.Options{Kind: kind, Expand: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		if res.Size > 1<<20 {
			t.Fatalf("the bomb is %d bytes", res.Size)
		}
		f, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		n := 0
		err = f.Records(func(r *Record) error {
			if r.Sample == nil || r.Sample.IP != 0x401000 {
				t.Fatalf("record %d: %+v", n, r)
			}
			n++
			return nil
		})
		runtime.ReadMemStats(&after)
		f.Close()
		limit := int64(maxRatio << 20)
		wantN := limit / int64(res.RecordSize)
		var fe *FormatError
		if !errors.As(err, &fe) || fe.File != path || !strings.Contains(err.Error(), fmt.Sprintf("expand past %d bytes", limit)) {
			t.Errorf("kind %d: %v, want the limit's error", kind, err)
		}
		if int64(n) != wantN {
			t.Errorf("kind %d: %d records before the limit, want %d", kind, n, wantN)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
			t.Errorf("kind %d: reading %d records of %d bytes allocated %d bytes", kind, n, res.RecordSize, alloc)
		}
		t.Logf("kind %d: %d-byte file, %d records of %d bytes read, %d bytes allocated: %v", kind, res.Size, n, res.RecordSize, after.TotalAlloc-before.TotalAlloc, err)
	}
}

// FuzzCompressed decompresses arbitrary compressed records (the seeds are
// streams of the zstd encoder, one a bomb) and checks that the walk
// allocates a bounded amount, however far they expand.
func FuzzCompressed(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	recs, all := manySamples(r, 200)
	var z bytes.Buffer
	e, err := zstd.NewWriter(&z, zstd.WithEncoderConcurrency(1))
	if err != nil {
		f.Fatal(err)
	}
	e.Write(all)
	e.Flush()
	stream := bytes.Clone(z.Bytes())
	f.Add(stream)
	if *writeSeeds {
		// A bomb: one sample repeated to 300 MB, past the limit.
		e.Write(bytes.Repeat(recs[0], 300<<20/len(recs[0])))
		e.Flush()
		bomb := bytes.Clone(z.Bytes())
		e.Close()
		seeds := map[string][]byte{"stream": stream, "bomb": bomb, "frame": bytes.Clone(z.Bytes())}
		for name, b := range seeds {
			if err := fuzzcorpus.Write("testdata/fuzz/FuzzCompressed", name, b); err != nil {
				f.Fatal(err)
			}
		}
	}
	// Streams that ask for more history than the encoder's default
	// are refused, so that what a walk may allocate is known: the
	// window, the history and the decoder's buffers.
	defer func(w uint64) { maxWindow = w }(maxWindow)
	maxWindow = 8 << 20
	const maxAlloc = 48 << 20
	f.Fuzz(func(t *testing.T, z []byte) {
		size := len(z)
		var recs [][]byte
		for len(z) > 0 {
			n := min(len(z), 60000)
			recs = append(recs, compressedRecord(RecordCompressed2, z[:n]))
			z = z[n:]
		}
		pf, err := Parse(testFile(recs), "fuzz")
		if err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		pf.Records(func(r *Record) error { return nil })
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > maxAlloc {
			t.Fatalf("decompressing %d bytes allocated %d", size, alloc)
		}
	})
}

// BenchmarkCompressedRecords reads 20,000 samples (6.6 MB) compressed as
// perf record -z does (level 1, flushed every 256 KiB), in 64 KiB
// COMPRESSED2 records. Bytes are the decompressed records'.
func BenchmarkCompressedRecords(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	_, all := manySamples(r, 20000)
	var z bytes.Buffer
	e, err := zstd.NewWriter(&z, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		b.Fatal(err)
	}
	var recs [][]byte
	for rest := all; len(rest) > 0; {
		n := min(len(rest), 256<<10)
		e.Write(rest[:n])
		e.Flush()
		rest = rest[n:]
		for z.Len() > 0 {
			recs = append(recs, compressedRecord(RecordCompressed2, z.Next(60000)))
		}
	}
	f, err := Parse(testFile(recs), "bench")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(all)))
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		if err := f.Records(func(*Record) error { n++; return nil }); err != nil || n != 20000 {
			b.Fatalf("%d records: %v", n, err)
		}
	}
}
