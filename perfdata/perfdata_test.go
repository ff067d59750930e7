package perfdata

import (
	"encoding/binary"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/internal/testutil/fuzzcorpus"
	"github.com/rewindstack/rewind/internal/testutil/perftest"
)

var writeSeeds = flag.Bool("write-seeds", false, "rewrite the committed fuzz seed corpora")

// testAttr is the attribute of the synthetic files: what rewind records.
func testAttr() *Attr {
	return &Attr{
		Type: TypeSoftware, Config: ConfigCPUClock, SamplePeriod: 99,
		SampleType: SampleIP | SampleTID | SampleTime | SampleCallchain | SampleCPU | SamplePeriod |
			SampleRegsUser | SampleStackUser,
		Flags:          FlagFreq | FlagMmap2 | FlagComm | FlagTask | FlagSampleIDAll,
		SampleRegsUser: 0x1ff | 0xff<<16, SampleStackUser: 64,
	}
}

// enc builds records little endian.
type enc struct{ b []byte }

func (e *enc) u16(v uint16) { e.b = binary.LittleEndian.AppendUint16(e.b, v) }
func (e *enc) u32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *enc) u64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *enc) str(s string) {
	n := (len(s) + 8) &^ 7
	e.b = append(e.b, s...)
	e.b = append(e.b, make([]byte, n-len(s))...)
}

// record wraps a body into a record with a sample_id trailer
// (TID, TIME, CPU for testAttr).
func record(typ uint32, misc uint16, body []byte, pid, tid uint32, time uint64, trailer bool) []byte {
	e := &enc{}
	size := 8 + len(body)
	if trailer {
		size += 24
	}
	e.u32(typ)
	e.u16(misc)
	e.u16(uint16(size))
	e.b = append(e.b, body...)
	if trailer {
		e.u32(pid)
		e.u32(tid)
		e.u64(time)
		e.u32(1)
		e.u32(0)
	}
	return e.b
}

// testRecords returns a COMM, an MMAP2, a FORK and two SAMPLEs.
func testRecords() [][]byte {
	var out [][]byte
	c := &enc{}
	c.u32(100)
	c.u32(100)
	c.str("prog")
	out = append(out, record(RecordComm, MiscCommExec, c.b, 100, 100, 10, true))
	m := &enc{}
	m.u32(100)
	m.u32(100)
	m.u64(0x400000)
	m.u64(0x1000)
	m.u64(0)
	m.u32(8)
	m.u32(1)
	m.u64(1234)
	m.u64(0)
	m.u32(5) // PROT_READ|PROT_EXEC
	m.u32(2)
	m.str("/usr/bin/prog")
	out = append(out, record(RecordMmap2, MiscUser, m.b, 100, 100, 20, true))
	f := &enc{}
	f.u32(100)
	f.u32(100)
	f.u32(101)
	f.u32(100)
	f.u64(25)
	out = append(out, record(RecordFork, 0, f.b, 100, 101, 25, true))
	for i, tid := range []uint32{100, 101} {
		s := &enc{}
		s.u64(0x400123)           // ip
		s.u32(100)                // pid
		s.u32(tid)                // tid
		s.u64(uint64(30 + i))     // time
		s.u32(1)                  // cpu
		s.u32(0)                  //
		s.u64(10101010)           // period
		s.u64(3)                  // callchain
		s.u64(ContextUser)        //
		s.u64(0x400123)           //
		s.u64(0x400456)           //
		s.u64(RegsABI64)          // regs
		for r := 0; r < 17; r++ { //
			s.u64(uint64(0x7ffd0000 + r*8)) //
		} //
		s.u64(64)                              // stack size
		s.b = append(s.b, make([]byte, 64)...) //
		s.u64(48)                              // dyn_size
		out = append(out, record(RecordSample, MiscUser, s.b, 0, 0, 0, false))
	}
	return out
}

// testFile builds a perf.data file with one attribute, the records, and a
// build-id feature section.
func testFile(recs [][]byte) []byte {
	attr := testAttr().Marshal()
	var data []byte
	for _, r := range recs {
		data = append(data, r...)
	}
	e := &enc{}
	e.u64(fileMagic)
	e.u64(fileHeaderSize)
	e.u64(uint64(len(attr) + 16))
	attrsOff := uint64(fileHeaderSize)
	idsOff := attrsOff + uint64(len(attr)+16)
	dataOff := idsOff + 8
	e.u64(attrsOff)
	e.u64(uint64(len(attr) + 16))
	e.u64(dataOff)
	e.u64(uint64(len(data)))
	e.u64(0) // event types
	e.u64(0)
	e.u64(1 << featBuildID)
	e.u64(0)
	e.u64(0)
	e.u64(0)
	e.b = append(e.b, attr...)
	e.u64(idsOff)
	e.u64(8)
	e.u64(42) // the event id
	e.b = append(e.b, data...)
	// feature table, then the build-id section
	bid := &enc{}
	bid.u32(0)
	bid.u16(MiscUser | MiscBuildIDSize)
	bid.u16(uint16(buildIDRecHead + 16))
	bid.u32(100)
	id := make([]byte, 24)
	for i := 0; i < 20; i++ {
		id[i] = byte(i + 1)
	}
	id[20] = 20
	bid.b = append(bid.b, id...)
	bid.str("/usr/bin/prog")
	featOff := uint64(len(e.b)) + 16
	e.u64(featOff)
	e.u64(uint64(len(bid.b)))
	e.b = append(e.b, bid.b...)
	return e.b
}

func TestAttrRoundTrip(t *testing.T) {
	a := testAttr()
	a.ClockID = -3
	a.SampleMaxStack = 127
	a.Config3 = 99
	b, err := ParseAttr(a.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	a.Size = AttrSize
	if b != *a {
		t.Errorf("round trip:\n got %+v\nwant %+v", b, *a)
	}
	if _, err := ParseAttr(make([]byte, 63)); err == nil {
		t.Error("63-byte attribute accepted")
	}
}

func TestSyntheticFile(t *testing.T) {
	checkSynthetic(t, testFile(testRecords()))
}

// TestSyntheticCompressed wraps the synthetic file's records as perf
// record -z does, in COMPRESSED and COMPRESSED2 records holding one
// Zstandard stream cut anywhere (inside a block, inside a record): the
// records read back are the same.
func TestSyntheticCompressed(t *testing.T) {
	for _, typ := range []uint32{RecordCompressed, RecordCompressed2} {
		for _, pieces := range []int{1, 2, 3, 7} {
			checkSynthetic(t, testFile(compressRecords(testRecords(), typ, pieces)))
		}
	}
	// A stream that stops inside a record, and one that is not zstd.
	recs := compressRecords(testRecords(), RecordCompressed, 3)
	for _, b := range [][]byte{testFile(recs[:2]), testFile([][]byte{record(RecordCompressed, 0, []byte("not zstd at all!"), 0, 0, 0, false)})} {
		f, err := Parse(b, "bad")
		if err != nil {
			t.Fatal(err)
		}
		err = f.Records(func(*Record) error { return nil })
		var fe *FormatError
		if !errors.As(err, &fe) || fe.File != "bad" {
			t.Errorf("a bad compressed stream: %v", err)
		}
	}
}

// compressRecords returns recs as perf record -z writes them: one
// Zstandard stream (of raw blocks, which any decoder must take), cut into
// pieces records of type typ.
func compressRecords(recs [][]byte, typ uint32, pieces int) [][]byte {
	var data []byte
	for _, r := range recs {
		data = append(data, r...)
	}
	z := binary.LittleEndian.AppendUint32(nil, 0xFD2FB528)
	z = append(z, 0x00, 0x50) // no content size or checksum; a 1 MiB window
	for len(data) > 0 {
		n := min(len(data), 100) // small blocks: the cuts fall inside some
		z = append(z, byte(n<<3), byte(n>>5), byte(n>>13))
		z = append(z, data[:n]...)
		data = data[n:]
	}
	var out [][]byte
	step := (len(z) + pieces - 1) / pieces
	for len(z) > 0 {
		n := min(step, len(z))
		e := &enc{}
		size := 8 + n
		if typ == RecordCompressed2 {
			size = (8 + 8 + n + 7) &^ 7
		}
		e.u32(typ)
		e.u16(0)
		e.u16(uint16(size))
		if typ == RecordCompressed2 {
			e.u64(uint64(n))
		}
		e.b = append(e.b, z[:n]...)
		for len(e.b) < size {
			e.b = append(e.b, 0)
		}
		out = append(out, e.b)
		z = z[n:]
	}
	return out
}

// checkSynthetic reads the synthetic file b and checks its records.
func checkSynthetic(t *testing.T, b []byte) {
	t.Helper()
	f, err := Parse(b, "synthetic")
	if err != nil {
		t.Fatal(err)
	}
	if len(f.BuildIDs) != 1 || f.BuildIDs[0].Filename != "/usr/bin/prog" || len(f.BuildIDs[0].ID) != 20 || f.BuildIDs[0].ID[19] != 20 {
		t.Errorf("build-ids %+v", f.BuildIDs)
	}
	var types []uint32
	var samples []Sample
	err = f.Records(func(r *Record) error {
		types = append(types, r.Type)
		switch r.Type {
		case RecordComm:
			if r.Comm.Comm != "prog" || !r.Comm.Exec || r.ID.Time != 10 {
				t.Errorf("comm %+v id %+v", *r.Comm, r.ID)
			}
		case RecordMmap2:
			m := r.Mmap
			if m.Filename != "/usr/bin/prog" || m.Addr != 0x400000 || m.Len != 0x1000 || !m.Executable || m.Ino != 1234 || r.ID.Time != 20 {
				t.Errorf("mmap2 %+v", *m)
			}
		case RecordFork:
			if r.Task.TID != 101 || r.Task.PTID != 100 || r.Task.Time != 25 {
				t.Errorf("fork %+v", *r.Task)
			}
		case RecordSample:
			s := *r.Sample
			s.Callchain = append([]uint64(nil), s.Callchain...)
			s.Regs = append([]uint64(nil), s.Regs...)
			samples = append(samples, s)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint32{RecordComm, RecordMmap2, RecordFork, RecordSample, RecordSample}; !equalU32(types, want) {
		t.Errorf("types %v, want %v", types, want)
	}
	if len(samples) != 2 {
		t.Fatalf("%d samples", len(samples))
	}
	s := samples[1]
	if s.IP != 0x400123 || s.PID != 100 || s.TID != 101 || s.Time != 31 || s.CPU != 1 || s.Period != 10101010 ||
		len(s.Callchain) != 3 || s.Callchain[2] != 0x400456 || len(s.Regs) != 17 || s.Regs[16] != 0x7ffd0000+16*8 || len(s.Stack) != 48 {
		t.Errorf("sample %+v", s)
	}
}

func equalU32(a, b []uint32) bool {
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

// TestTruncated cuts the synthetic file at every length: parsing never
// panics, errors name the file and an offset, and a file cut inside the
// data section still delivers the records before the cut.
func TestTruncated(t *testing.T) {
	full := testFile(testRecords())
	f0, _ := Parse(full, "x")
	dataStart, dataEnd := f0.DataRange()
	for n := 0; n < len(full); n++ {
		f, err := Parse(full[:n:n], "cut.data")
		if err != nil {
			if !strings.Contains(err.Error(), "cut.data") || !strings.Contains(err.Error(), "offset") {
				t.Errorf("cut at %d: error %q does not name the file and offset", n, err)
			}
			continue
		}
		count := 0
		err = f.Records(func(*Record) error { count++; return nil })
		if int64(n) < dataEnd && int64(n) > dataStart {
			if err == nil {
				t.Errorf("cut at %d inside the data section: no error", n)
			} else if !strings.Contains(err.Error(), "truncated") && !strings.Contains(err.Error(), "offset") {
				t.Errorf("cut at %d: %v", n, err)
			}
		}
		if int64(n) >= dataEnd && (err != nil || count != 5) {
			t.Errorf("cut at %d after the data: %d records, %v", n, count, err)
		}
	}
}

func TestCorruptRecord(t *testing.T) {
	recs := testRecords()
	recs[1] = append([]byte(nil), recs[1]...)
	recs[1][6] = 4 // record size below the header size
	f, err := Parse(testFile(recs), "bad.data")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = f.Records(func(*Record) error { n++; return nil })
	var pe *FormatError
	if !errors.As(err, &pe) || pe.File != "bad.data" || n != 1 {
		t.Fatalf("after 1 record: %d records, error %v", n, err)
	}
	if _, start := f.DataRange(); pe.Offset == 0 || int64(pe.Offset) >= start {
		t.Errorf("error offset %#x", pe.Offset)
	}
	t.Log(err)
}

// TestPerfRecordFile reads a file written by perf record --call-graph dwarf
// (and one written with -z, its records compressed) and compares the
// sample, MMAP2 and COMM counts with perf report --stats and the build-ids
// with perf buildid-list.
func TestPerfRecordFile(t *testing.T) {
	perf := perftest.RequirePerf(t)
	exe := perftest.BuildCPU(t, "-fomit-frame-pointer")
	t.Run("plain", func(t *testing.T) { testPerfRecordFile(t, perf, exe, nil) })
	t.Run("zstd", func(t *testing.T) { testPerfRecordFile(t, perf, exe, []string{"-z"}) })
}

func testPerfRecordFile(t *testing.T, perf, exe string, flags []string) {
	data := filepath.Join(t.TempDir(), "perf.data")
	args := append([]string{"record", "-q", "-e", "cpu-clock", "-F", "499", "--call-graph", "dwarf,4096"}, flags...)
	args = append(args, "-o", data, "--", exe, "0.5", "2")
	if out, err := exec.Command(perf, args...).CombinedOutput(); err != nil {
		t.Skipf("perf record cannot run here: %v\n%s", err, out)
	}
	f, err := Open(data)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	counts := map[uint32]int{}
	var exeMapped bool
	var withStack, noUser int
	err = f.Records(func(r *Record) error {
		counts[r.Type]++
		if r.Mmap != nil && r.Mmap.Filename == exe && r.Mmap.Executable {
			exeMapped = true
		}
		if r.Sample != nil && len(r.Sample.Regs) > 0 && len(r.Sample.Stack) > 0 && len(r.Sample.Stack) <= 4096 {
			withStack++
		}
		if r.Sample != nil && (len(r.Sample.Regs) == 0 || len(r.Sample.Stack) == 0) {
			// The kernel copies no user registers or stack for a sample
			// taken as the thread exits (its mm already gone).
			noUser++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(perf, "report", "--stats", "-i", data).Output()
	if err != nil {
		t.Fatal(err)
	}
	stat := func(name string) int {
		m := regexp.MustCompile(`(?m)^\s*` + name + ` events:\s+(\d+)`).FindSubmatch(out)
		if m == nil {
			return 0
		}
		n, _ := strconv.Atoi(string(m[1]))
		return n
	}
	want := stat("SAMPLE")
	if counts[RecordSample] != want || want == 0 {
		t.Errorf("%d samples, perf report counts %d", counts[RecordSample], want)
	}
	if counts[RecordMmap2] != stat("MMAP2") || counts[RecordComm] != stat("COMM") {
		t.Errorf("%d MMAP2 and %d COMM records, perf report counts %d and %d", counts[RecordMmap2], counts[RecordComm], stat("MMAP2"), stat("COMM"))
	}
	if compressed := stat("COMPRESSED") + stat("COMPRESSED2"); (compressed > 0) != (len(flags) > 0) {
		t.Errorf("perf report counts %d compressed records in a file recorded with %q", compressed, flags)
	}
	if withStack+noUser != want || noUser*50 > want {
		t.Errorf("%d of %d samples have registers and a stack copy, %d have no user registers", withStack, want, noUser)
	}
	if !exeMapped {
		t.Errorf("no executable MMAP2 of %s", exe)
	}
	out, err = exec.Command(perf, "buildid-list", "-i", data).Output()
	if err != nil {
		t.Fatal(err)
	}
	var wantIDs, gotIDs []string
	for _, line := range strings.Split(string(out), "\n") {
		// perf record -z leaves the build-id feature out (it does not
		// read back what it compressed): perf buildid-list then lists
		// the mapped files with no build-id.
		if f := strings.Fields(line); len(f) == 2 {
			wantIDs = append(wantIDs, line)
		}
	}
	for _, b := range f.BuildIDs {
		gotIDs = append(gotIDs, hexID(b.ID)+" "+b.Filename)
	}
	sort.Strings(wantIDs)
	sort.Strings(gotIDs)
	if strings.Join(wantIDs, "\n") != strings.Join(gotIDs, "\n") {
		t.Errorf("build-ids:\n%s\nperf buildid-list:\n%s", strings.Join(gotIDs, "\n"), strings.Join(wantIDs, "\n"))
	}
	t.Logf("records by type %v", counts)
}

func hexID(b []byte) string {
	const digits = "0123456789abcdef"
	var s strings.Builder
	for _, c := range b {
		s.WriteByte(digits[c>>4])
		s.WriteByte(digits[c&15])
	}
	return s.String()
}

// FuzzFile parses arbitrary files and decodes all their records.
func FuzzFile(f *testing.F) {
	seeds := map[string][]byte{
		"synthetic": testFile(testRecords()),
		"cut":       testFile(testRecords())[:300],
		"pipe":      testPipeFile(testRecords()),
		"zstd":      testFile(compressRecords(testRecords(), RecordCompressed, 3)),
		"zstd2":     testFile(compressRecords(testRecords(), RecordCompressed2, 2)),
	}
	if *writeSeeds {
		for name, b := range seeds {
			if err := fuzzcorpus.Write("testdata/fuzz/FuzzFile", name, b); err != nil {
				f.Fatal(err)
			}
		}
	}
	for _, b := range seeds {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		pf, err := Parse(b, "fuzz")
		if err != nil {
			return
		}
		pf.Records(func(r *Record) error { return nil })
	})
}

// FuzzDecode decodes arbitrary records under arbitrary attributes.
func FuzzDecode(f *testing.F) {
	recs := testRecords()
	a := testAttr()
	if *writeSeeds {
		for i, r := range recs {
			if err := fuzzcorpus.Write("testdata/fuzz/FuzzDecode", "rec"+strconv.Itoa(i), a.SampleType, a.Flags, a.SampleRegsUser, r); err != nil {
				f.Fatal(err)
			}
		}
	}
	for _, r := range recs {
		f.Add(a.SampleType, a.Flags, a.SampleRegsUser, r)
	}
	f.Fuzz(func(t *testing.T, sampleType, flags, regsMask uint64, rec []byte) {
		attr := &Attr{SampleType: sampleType & sampleKnown, Flags: flags, SampleRegsUser: regsMask, ReadFormat: flags >> 40, BranchSampleType: flags >> 20}
		d, err := NewDecoder([]*Attr{attr}, nil)
		if err != nil {
			return
		}
		if len(rec) >= 8 {
			binary.LittleEndian.PutUint16(rec[6:], uint16(len(rec)))
		}
		var r Record
		if err := d.Decode(rec, 0, &r); err == nil && r.Sample != nil {
			if len(r.Sample.Stack) > len(rec) || len(r.Sample.Callchain)*8 > len(rec) {
				t.Fatalf("decoded more than the record holds")
			}
		}
	})
}

func TestMain(m *testing.M) { os.Exit(fixture.Main(m)) }

// TestUnknownID: a sample whose id no attribute has is reported as
// ErrUnknownID (which File.Records skips and counts), not as a corrupt
// record.
func TestUnknownID(t *testing.T) {
	st := uint64(SampleIdentifier | SampleIP)
	a0, a1 := &Attr{SampleType: st}, &Attr{SampleType: st}
	d, err := NewDecoder([]*Attr{a0, a1}, map[uint64]int{5: 0, 6: 1})
	if err != nil {
		t.Fatal(err)
	}
	sample := func(id uint64) []byte {
		b := make([]byte, 24)
		binary.LittleEndian.PutUint32(b, RecordSample)
		binary.LittleEndian.PutUint16(b[6:], 24)
		binary.LittleEndian.PutUint64(b[8:], id)
		binary.LittleEndian.PutUint64(b[16:], 0x401000)
		return b
	}
	var rec Record
	if err := d.Decode(sample(77), 0, &rec); !errors.Is(err, ErrUnknownID) {
		t.Fatalf("sample of an unknown id: %v, want ErrUnknownID", err)
	}
	if err := d.Decode(sample(6), 0, &rec); err != nil || rec.Attr != a1 || rec.Sample.IP != 0x401000 {
		t.Fatalf("sample of id 6: %v, attr %p (want %p), ip %#x", err, rec.Attr, a1, rec.Sample.IP)
	}
}
